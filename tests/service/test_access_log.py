"""The service's access log and request ids: every request's line (method, path, status, duration,
request id) in the role's one format, the caller's X-Request-ID echoed (a new id when it sent none
or an unusable one), the id on an unhandled error's log line and response, sampling that keeps
every failure, and the access log off; every line written by the app's shutdown, and a full queue
dropping (and counting) lines while the requests answer. Then `streamrec serve` under real uvicorn
writing JSON lines."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from core.logs import LoggingConfig, configure
from service.app import create_app
from tests.prom_scrape import samples

from .service_support import make_settings, wait_until
from .uvicorn_support import free_port

ACCESS = re.compile(r"^\S+Z INFO  service service\.access: (GET|POST) (\S+) (\d{3}) (\d+\.\d\d) ms request_id=(\S+)$")


@contextlib.contextmanager
def _role_log(out: io.StringIO) -> Iterator[io.StringIO]:
    """The role's log (text format) written to ``out``; the root logger as it was afterwards."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    configure(role="service", stream=out)
    try:
        yield out
    finally:
        for h in list(root.handlers):
            if h not in handlers:
                root.removeHandler(h)
        root.setLevel(level)


@pytest.fixture
def log_lines() -> Iterator[io.StringIO]:
    with _role_log(io.StringIO()) as out:
        yield out


def _client(tmp_path: Path, config: LoggingConfig | None = None) -> TestClient:
    app = create_app(make_settings(tmp_path), log_config=config)

    @app.get("/boom")
    async def boom() -> None:
        raise RuntimeError("a bug")

    return TestClient(app, raise_server_exceptions=False)


def _access(out: io.StringIO) -> list[tuple[str, ...]]:
    return [m.groups() for line in out.getvalue().splitlines() if (m := ACCESS.match(line))]


def test_each_request_is_logged_with_its_id_and_the_id_is_echoed(tmp_path: Path, log_lines: io.StringIO) -> None:
    with _client(tmp_path) as client:
        given = client.get("/healthz", headers={"X-Request-ID": "trace-42.a"})
        made = client.get("/no/such/route")
        unusable = client.get("/healthz", headers={"X-Request-ID": "two words"})
    assert given.headers["x-request-id"] == "trace-42.a"
    assert re.fullmatch(r"[0-9a-f]{32}", made.headers["x-request-id"])
    assert unusable.headers["x-request-id"] not in ("two words", made.headers["x-request-id"])
    lines = _access(log_lines)
    assert [(m, p, s, rid) for m, p, s, _, rid in lines] == [
        ("GET", "/healthz", "200", "trace-42.a"), ("GET", "/no/such/route", "404", made.headers["x-request-id"]),
        ("GET", "/healthz", "200", unusable.headers["x-request-id"])]


def test_an_unhandled_error_names_the_request_in_its_log_and_response(tmp_path: Path,
                                                                      log_lines: io.StringIO) -> None:
    with _client(tmp_path) as client:
        r = client.get("/boom", headers={"X-Request-ID": "req-500"})
    assert r.status_code == 500 and r.headers["x-request-id"] == "req-500"
    assert r.json()["error"]["code"] == "internal_error"
    error = next(line for line in log_lines.getvalue().splitlines() if "unhandled error" in line)
    assert error.endswith("unhandled error on GET /boom request_id=req-500")
    assert [(s, rid) for _, p, s, _, rid in _access(log_lines) if p == "/boom"] == [("500", "req-500")]


def test_sampling_keeps_every_failure_and_off_writes_nothing(tmp_path: Path, log_lines: io.StringIO) -> None:
    with _client(tmp_path, LoggingConfig(access_sample=0.0)) as client:
        for _ in range(5):
            assert client.get("/healthz").status_code == 200
        client.get("/missing")
    assert [(p, s) for _, p, s, _, _ in _access(log_lines)] == [("/missing", "404")]
    with _client(tmp_path, LoggingConfig(access_log=False)) as client:
        client.get("/missing")
        assert client.get("/healthz").headers["x-request-id"]  # the id is there with the log off
    assert len(_access(log_lines)) == 1


def test_every_line_is_in_the_log_once_the_app_has_shut_down(tmp_path: Path, log_lines: io.StringIO) -> None:
    with _client(tmp_path) as client:
        for i in range(300):
            assert client.get("/healthz", headers={"X-Request-ID": f"n-{i}"}).status_code == 200
    assert [rid for _, _, _, _, rid in _access(log_lines)] == [f"n-{i}" for i in range(300)]


class _HeldStream(io.StringIO):
    """A log stream whose first access-log write waits until the test lets it go: the writer is busy."""

    def __init__(self) -> None:
        super().__init__()
        self.writing, self.go = threading.Event(), threading.Event()

    def write(self, text: str) -> int:
        if "service.access" in text and not self.go.is_set():
            self.writing.set()
            assert self.go.wait(60), "the test never let the write go"
        return super().write(text)


def test_a_full_queue_drops_and_counts_lines_and_the_requests_still_answer(tmp_path: Path) -> None:
    held = _HeldStream()
    with _role_log(held), _client(tmp_path, LoggingConfig(access_queue_lines=3)) as client:
        try:
            assert client.get("/healthz", headers={"X-Request-ID": "first"}).status_code == 200
            assert held.writing.wait(30)  # the writer holds the first line and waits in its write
            for i in range(20):
                assert client.get("/healthz", headers={"X-Request-ID": f"q-{i}"}).status_code == 200
            got = samples(client.get("/metrics").text)
        finally:
            held.go.set()
    assert got[("streamrec_access_log_dropped_total", ())] == 17  # three queued, the rest dropped
    assert [rid for _, _, _, _, rid in _access(held)] == ["first", "q-0", "q-1", "q-2"]


@pytest.mark.process
def test_serve_writes_json_lines_with_uvicorns_own_and_the_access_log(tmp_path: Path) -> None:
    port = free_port()
    config = tmp_path / "service.yaml"
    config.write_text(f"exports_dir: {tmp_path / 'exports'}\nlogging: {{format: json}}\n")
    log_path = tmp_path / "service.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "cli", "serve", "--config", str(config), "--port", str(port)],
                                env={**os.environ, "STREAMREC_ADMIN_TOKEN": "json-log-test-token-0123456789"},
                                stdout=log, stderr=subprocess.STDOUT)
    try:
        def up() -> bool:
            assert proc.poll() is None, log_path.read_text()
            try:
                return httpx.get(f"http://127.0.0.1:{port}/healthz", headers={"X-Request-ID": "json-1"},
                                 timeout=2).status_code == 200
            except httpx.TransportError:
                return False

        wait_until(up, timeout=90, what="streamrec serve")
        wait_until(lambda: "json-1" in log_path.read_text(), what="the access line")
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:  # a serve that ignores SIGTERM must not outlive the test
            proc.kill()
            proc.wait()
    objects = [json.loads(line) for line in log_path.read_text().splitlines()]  # every line is one object
    assert {o["role"] for o in objects} == {"service"}
    assert any(o["logger"].startswith("uvicorn") for o in objects)  # uvicorn's own lines, in the same format
    access = next(o for o in objects if o.get("request_id") == "json-1")
    assert access["logger"] == "service.access" and access["path"] == "/healthz" and access["status"] == 200
    assert access["method"] == "GET" and access["duration_ms"] >= 0
