"""Hostile HTTP against `streamrec serve` under real uvicorn: invented methods do not grow
/metrics, half-sent bodies are cut off (408) body_timeout_s after their head, and the service
answers normally afterwards (connection limits and deadlines: test_connection_deadlines)."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from .service_support import USER_IDS, BundleBuilder
from .uvicorn_support import serving

pytestmark = pytest.mark.process


@pytest.fixture
def served(tmp_path: Path, builder: BundleBuilder) -> Iterator[str]:
    with serving(tmp_path, builder.root, limits={"body_timeout_s": 0.5}) as base:
        yield base


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
    assert all(a.startswith(b"HTTP/1.1 408") and b"not received within 0.5 s" in a for a in answers), answers[:1]
    assert held < 30  # cut off, not held until the client gives up
    assert _lookup_ok(served)
