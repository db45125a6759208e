"""Shards that `up` starts again on other ports (a port taken between picking and binding) take the
service's read-through with them: its file is written again with the new endpoints and the running
service starts again to read it, without that counting as a crash."""

from __future__ import annotations

import io
import os
import sys
import time
from pathlib import Path

import pytest
import yaml

from launcher.launch import LaunchSpec
from launcher.system_config import load_config
from launcher.up import LocalSystem, UpOptions
from launcher.up_run_dir import ps_secret, write_run_configs

pytestmark = pytest.mark.process

# stands in for the service: says which shards its read-through names, then serves until stopped
SERVICE = """
import sys, time, yaml
print("read-through", ",".join(yaml.safe_load(open(sys.argv[1]))["read_through"]["endpoints"]), flush=True)
time.sleep(600)
"""


def _read_through_line(log: Path) -> str:
    lines = [ln for ln in log.read_text().splitlines() if ln.startswith("read-through ")]
    return lines[-1].split(" ", 1)[1] if lines else ""


def test_the_services_read_through_follows_shards_started_on_other_ports(tmp_path: Path) -> None:
    path = tmp_path / "streamrec.yaml"
    path.write_text(yaml.safe_dump({"service": {"read_through": {"endpoints": ["tcp://127.0.0.1:1"]}}}))
    out = io.StringIO()
    system = LocalSystem(UpOptions(config=load_config(path), run_dir=tmp_path / "run", console=False), out=out)
    system.run.logs.mkdir(parents=True)
    system.secret_file = ps_secret(system.run.root)
    system.bootstrap, system.control_endpoint = "127.0.0.1:9092", "tcp://127.0.0.1:2"
    cluster = system.roles.plan(LaunchSpec(
        servers=2, workers=1, command=(sys.executable, "-c", "pass"), ps_config=tmp_path / "ps.yaml",
        log_dir=system.run.logs, checkpoint_dir=tmp_path / "ckpt", metrics_ports=True,
        secret_file=system.secret_file), out=out)
    first = ",".join(cluster.shard_endpoints)
    write_run_configs(system.cfg, system.run, bootstrap=system.bootstrap, control_endpoint=system.control_endpoint,
                      secret_file=system.secret_file, shard_endpoints=cluster.shard_endpoints)
    script = tmp_path / "service.py"
    script.write_text(SERVICE)
    service = system.roles.start("service", [sys.executable, str(script), str(system.run.roles / "service.yaml")],
                                 env=dict(os.environ))
    said: list[str] = []
    try:
        deadline = time.monotonic() + 60
        while _read_through_line(service.log_path) != first:
            assert time.monotonic() < deadline and service.exit_code() is None, service.log_path.read_text()
            time.sleep(0.02)
        cluster.launcher.on_replan = lambda: system._shards_moved(cluster)
        cluster.launcher._replan_shards()  # what a shard that could not bind its port leads to
        moved = ",".join(cluster.shard_endpoints)
        assert moved != first
        assert system.roles.tend(said.append) is None  # the watch loop's turn: the service starts again
        while _read_through_line(service.log_path) != moved:
            assert time.monotonic() < deadline and service.exit_code() is None, service.log_path.read_text()
            time.sleep(0.02)
    finally:
        service.kill()
        service.wait(30)
        service.close_log()
    assert said == [f"service starts again: its read-through follows the shards to {moved}"]
    assert service.restarts == 1 and service.exit_codes == []  # no crash: nothing counted against its budget
    assert "Prometheus file_sd targets" in out.getvalue()
