"""`streamrec serve` as a subprocess under real uvicorn on a free loopback port, for tests that
need the real server's connection handling (raw sockets, deadlines, many connections)."""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import yaml
from prometheus_client.parser import text_string_to_metric_families

from core.ports import free_ports

from .service_support import wait_until


def free_port() -> int:
    return free_ports(1)[0]


def allow_open_files(n: int) -> None:
    """This process (and the server it starts) may hold ``n`` files at once, within the hard limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < n:
        resource.setrlimit(resource.RLIMIT_NOFILE, (n if hard == resource.RLIM_INFINITY else min(n, hard), hard))


@contextlib.contextmanager
def serving(tmp_path: Path, exports: Path, **config: Any) -> Iterator[str]:
    """The base URL of a started `streamrec serve` over ``exports`` (``config``: more service YAML keys)."""
    port = free_port()
    cfg = tmp_path / f"service-{port}.yaml"
    cfg.write_text(yaml.safe_dump({"exports_dir": str(exports), "poll_seconds": 0.1, "index": {"kind": "flat"},
                                   **config}))
    log = (tmp_path / f"service-{port}.log").open("wb")
    proc = subprocess.Popen([sys.executable, "-m", "cli", "serve", "--config", str(cfg), "--port", str(port),
                             "--log-level", "warning"],
                            env={**os.environ, "STREAMREC_ADMIN_TOKEN": "uvicorn-test-token-0123456789"},
                            stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        assert proc.poll() is None, (tmp_path / f"service-{port}.log").read_text()
        try:
            return httpx.get(f"{base}/readyz", timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    try:
        wait_until(ready, timeout=90, what="uvicorn ready")
        yield base
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            log.close()


def metric(base: str, name: str, **labels: str) -> float:
    """One sample of the server's /metrics (0 when the series does not exist yet)."""
    text = httpx.get(f"{base}/metrics", timeout=30).text
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and s.labels == labels:
                return s.value
    return 0.0
