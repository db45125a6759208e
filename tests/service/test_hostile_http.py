"""Hostile HTTP against `streamrec serve` under real uvicorn: invented methods do not grow
/metrics, half-sent bodies are cut off after body_timeout_s, connections past max_connections
are refused with 503, and the service answers normally afterwards."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from .service_support import USER_IDS, BundleBuilder, wait_until


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def served(tmp_path: Path, builder: BundleBuilder) -> Iterator[str]:
    port = _free_port()
    cfg = tmp_path / "service.yaml"
    cfg.write_text(f"exports_dir: {builder.root}\npoll_seconds: 0.1\nindex:\n  kind: flat\n"
                   "limits:\n  body_timeout_s: 0.5\n  max_connections: 20\n")
    proc = subprocess.Popen([sys.executable, "-m", "cli", "serve", "--config", str(cfg), "--port", str(port)],
                            env={**os.environ, "STREAMREC_ADMIN_TOKEN": "hostile-test-token-0123456789"},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        assert proc.poll() is None, proc.stdout.read().decode() if proc.stdout else ""
        try:
            return httpx.get(f"{base}/readyz", timeout=1).status_code == 200
        except httpx.TransportError:
            return False

    try:
        wait_until(ready, timeout=60, what="uvicorn ready")
        yield base
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)


def _series(text: str) -> int:
    return sum(1 for line in text.splitlines() if line and not line.startswith("#"))


def _lookup_ok(base: str) -> bool:
    r = httpx.post(f"{base}/v1/embeddings:lookup", json={"slot": "user", "ids": [int(USER_IDS[0])]}, timeout=10)
    return r.status_code == 200


def test_invented_methods_do_not_grow_metrics(served: str) -> None:
    with httpx.Client(base_url=served, timeout=10) as c:
        for i in range(5):
            c.request(f"X{i}", "/healthz")
        c.get("/metrics")  # the scrape's own series exist from here on
        before = _series(c.get("/metrics").text)
        for i in range(5, 305):
            c.request(f"INVENTED{i}", "/healthz")
        text = c.get("/metrics").text
    assert _series(text) == before  # the same series, only their counts moved
    assert 'method="other"' in text and "INVENTED" not in text


def test_half_sent_bodies_are_cut_off_and_the_service_goes_on(served: str) -> None:
    host, port = served.removeprefix("http://").split(":")
    socks = []
    for _ in range(15):
        s = socket.create_connection((host, int(port)), timeout=10)
        s.sendall(b"POST /v1/embeddings:lookup HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 1000\r\n\r\n{\"slot\": ")
        socks.append(s)
    t0 = time.monotonic()
    answers = []
    for s in socks:
        data = b""
        while True:  # the server answers and closes: read to EOF
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        answers.append(data)
        s.close()
    held = time.monotonic() - t0
    assert all(a.startswith(b"HTTP/1.1 422") and b"not received within 0.5 s" in a for a in answers), answers[:1]
    assert held < 30  # cut off, not held until the client gives up
    assert _lookup_ok(served)


def test_connections_past_the_limit_get_503(served: str) -> None:
    host, port = served.removeprefix("http://").split(":")
    socks = [socket.create_connection((host, int(port)), timeout=10) for _ in range(25)]
    for s in socks:  # each holds a request open: its body never comes
        s.sendall(b"POST /v1/predict HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n")
    statuses = []
    for s in socks:
        statuses.append(s.recv(64).split(b" ")[1])  # 503 at once past the limit, else 422 at the body timeout
        s.close()
    assert statuses.count(b"503") >= 5 and set(statuses) <= {b"503", b"422"}, statuses
    wait_until(lambda: _lookup_ok(served), timeout=30, what="service answers again")
