"""Every role of a `streamrec up` run is scrapeable: the shards and trainers on /metrics ports
`up` picks, the service on its API port, told in one line at start and written as a Prometheus
file_sd targets file into the run directory; each target answers with its role's process metrics
and build info. Also the targets file's form (launcher.up_metrics) without a run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from launcher.launch import free_ports
from launcher.up_metrics import TARGETS_FILE, announce, scrape_address, write_targets
from tests.launcher.test_up_e2e import CONFIG, Up
from tests.prom_scrape import samples, scrape


def test_the_targets_file_is_file_sd_json_with_job_and_role_labels(tmp_path: Path) -> None:
    addresses = {"server.0": "127.0.0.1:9101", "worker.0": "127.0.0.1:9102", "service": "127.0.0.1:8000"}
    line = announce(tmp_path, addresses)
    assert line.count("\n") == 0 and "server.0 127.0.0.1:9101" in line and str(tmp_path / TARGETS_FILE) in line
    groups = json.loads((tmp_path / TARGETS_FILE).read_text())
    assert groups == [
        {"targets": ["127.0.0.1:9101"], "labels": {"job": "streamrec-shard", "role": "server.0"}},
        {"targets": ["127.0.0.1:9102"], "labels": {"job": "streamrec-trainer", "role": "worker.0"}},
        {"targets": ["127.0.0.1:8000"], "labels": {"job": "streamrec-api", "role": "service"}}]
    write_targets(tmp_path, {"server.0": "127.0.0.1:9200"})  # replaced whole, no partial file left
    assert [p.name for p in tmp_path.iterdir()] == [TARGETS_FILE]
    assert json.loads((tmp_path / TARGETS_FILE).read_text())[0]["targets"] == ["127.0.0.1:9200"]


def test_a_wildcard_bind_is_scraped_on_loopback() -> None:
    assert scrape_address("0.0.0.0", 80) == "127.0.0.1:80"
    assert scrape_address("::", 80) == "[::1]:80"
    assert scrape_address("fd00::1", 80) == "[fd00::1]:80"
    assert scrape_address("10.0.0.5", 80) == "10.0.0.5:80"


@pytest.mark.process
def test_every_role_of_an_up_run_serves_metrics_where_the_targets_file_says(tmp_path: Path) -> None:
    config = tmp_path / "streamrec.yaml"
    config.write_text(yaml.safe_dump({**CONFIG, "up": {**CONFIG["up"], "shards": 1, "workers": 1}}))
    (port,) = free_ports(1)
    up = Up(tmp_path / "run", config, port)
    try:
        targets_file = tmp_path / "run" / TARGETS_FILE
        groups = up.wait_for("the targets file", lambda: targets_file.exists() and json.loads(targets_file.read_text()))
        roles = {g["labels"]["role"]: g["targets"][0] for g in groups}
        assert set(roles) == {"server.0", "worker.0", "service"}
        assert up.output().count("metrics (/metrics):") == 1

        def role_info(address: str) -> str | None:
            page = samples(scrape(f"http://{address}/metrics", timeout_s=5.0))
            assert ("process_start_time_seconds", ()) in page
            return next(dict(key)["role"] for name, key in page if name == "streamrec_build_info")

        for role, address in roles.items():
            expected = {"server": "shard", "worker": "trainer", "service": "service"}[role.split(".")[0]]
            assert up.wait_for(f"{role}'s /metrics at {address}", lambda a=address: role_info(a)) == expected
        assert up.ctrl_c() == 0, up.output()
    finally:
        up.kill()
