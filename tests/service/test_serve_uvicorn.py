"""`streamrec serve` under real uvicorn: serves, picks up new bundles while running, stops on
SIGTERM; and the settings refuse a default admin token off loopback."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from cli.main import main as cli_main
from core.errors import ConfigError
from core.ports import free_ports
from service.settings import ServiceSettings, load_settings

from .service_support import TOKEN, USER_IDS, BundleBuilder, wait_until


def _free_port() -> int:
    return free_ports(1)[0]


def _config(tmp_path: Path, exports: Path) -> Path:
    cfg = tmp_path / "service.yaml"
    cfg.write_text(f"exports_dir: {exports}\npoll_seconds: 0.1\nindex:\n  kind: flat\n")
    return cfg


@pytest.mark.process
def test_serve_runs_under_uvicorn_and_follows_new_bundles(tmp_path: Path, builder: BundleBuilder) -> None:
    port = _free_port()
    env = {**os.environ, "STREAMREC_ADMIN_TOKEN": TOKEN}
    cmd = [sys.executable, "-m", "cli", "serve", "--config", str(_config(tmp_path, builder.root)),
           "--port", str(port)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        def ready() -> bool:
            assert proc.poll() is None, proc.stdout.read().decode() if proc.stdout else ""
            try:
                return httpx.get(f"{base}/readyz", timeout=1).status_code == 200
            except httpx.TransportError:
                return False

        wait_until(ready, timeout=60, what="uvicorn ready")
        with httpx.Client(base_url=base, timeout=5) as c:
            r = c.post("/v1/embeddings:lookup", json={"slot": "user", "ids": [int(USER_IDS[0])]})
            assert r.status_code == 200 and r.json()["version"] == 1
            builder.push("user", USER_IDS[:5])
            builder.export("delta")
            wait_until(lambda: c.get("/readyz").json()["version"] == 2, what="delta 2 served")
            rows = np.array(c.post("/v1/embeddings:lookup", json={"slot": "user", "ids": [int(USER_IDS[0])]})
                            .json()["rows"], np.float32)
            assert np.array_equal(rows, builder.expected("user", USER_IDS[:1])[1])
            assert c.get("/admin/status", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
            metrics = c.get("/metrics").text
            samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
                       for family in text_string_to_metric_families(metrics) for s in family.samples}
            assert samples[("streamrec_request_seconds_count", (("method", "POST"), ("route", "/v1/embeddings:lookup"),
                                                                 ("status", "200")))] >= 1
            assert samples[("streamrec_bundle_version", ())] == 2
    finally:
        proc.send_signal(signal.SIGTERM)
        out = proc.communicate(timeout=30)[0].decode()
    # uvicorn shuts down gracefully, then re-raises the signal it caught
    assert proc.returncode in (0, -signal.SIGTERM) and "Finished server process" in out, out


def test_refuses_default_or_empty_token_off_loopback(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    cfg = _config(tmp_path, tmp_path / "exports")
    for token in ("", "changeme"):
        with pytest.raises(ConfigError, match="not loopback"):
            load_settings(cfg, env={"STREAMREC_ADMIN_TOKEN": token}, host="0.0.0.0")
    os.environ.pop("STREAMREC_ADMIN_TOKEN", None)
    assert cli_main(["serve", "--config", str(cfg), "--host", "0.0.0.0", "--port", "1"]) == 2
    assert "admin token" in capsys.readouterr().err
    ok = load_settings(cfg, env={"STREAMREC_ADMIN_TOKEN": "a-real-secret"}, host="0.0.0.0")
    assert ok.host == "0.0.0.0" and ok.admin_token == "a-real-secret"
    assert load_settings(cfg, env={}).admin_token == ""  # loopback: allowed, the admin API is then disabled
    (tmp_path / "bad.yaml").write_text("exports_dir: x\nadmin_token: hunter2\n")
    with pytest.raises(ConfigError, match="environment"):
        load_settings(tmp_path / "bad.yaml", env={})
    (tmp_path / "bad2.yaml").write_text("exports_dir: x\nlimits: {max_ids: 0}\nbogus: 1\n")
    with pytest.raises(ConfigError, match="bogus"):
        load_settings(tmp_path / "bad2.yaml", env={})
    with pytest.raises(ValueError, match="not loopback"):
        ServiceSettings(exports_dir="x", host="10.1.2.3", admin_token="changeme")
