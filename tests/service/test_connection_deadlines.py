"""Connection deadlines of `streamrec serve` under real uvicorn: a thousand silent connections
leave /healthz answering (at the connection limit the longest-idle one is closed to make room;
only when every connection is busy with a request is a new one refused with 503); a connection
that sends no complete request head is closed at the header deadline, an idle kept-alive one at
the keep-alive timeout; a body trickled in slower than the whole-body deadline is answered 408
and counted; the service answers as before afterwards."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from .service_support import USER_IDS, BundleBuilder, wait_until
from .uvicorn_support import allow_open_files, metric, serving

pytestmark = pytest.mark.process

IDLE = 1000


def _healthz(base: str) -> int:
    return httpx.get(f"{base}/healthz", timeout=30).status_code


def _lookup_ok(base: str) -> bool:
    r = httpx.post(f"{base}/v1/embeddings:lookup", json={"slot": "user", "ids": [int(USER_IDS[0])]}, timeout=30)
    return r.status_code == 200 and r.json()["ids"] == [int(USER_IDS[0])]


def _closed_by_server(s: socket.socket) -> bool:
    """The server closed ``s``: end of stream (or a reset) is waiting; nothing read blocks."""
    s.setblocking(False)
    try:
        return s.recv(65536) == b""
    except BlockingIOError:
        return False
    except ConnectionResetError:
        return True


def _connect(base: str) -> socket.socket:
    host, port = base.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=30)


@contextlib.contextmanager
def _sockets() -> Iterator[list[socket.socket]]:
    socks: list[socket.socket] = []
    try:
        yield socks
    finally:
        for s in socks:
            s.close()


def test_a_thousand_idle_connections_leave_healthz_answering(tmp_path: Path, builder: BundleBuilder) -> None:
    allow_open_files(4 * IDLE)
    # a long header deadline: here only the room-making at the limit may close the silent ones
    with serving(tmp_path, builder.root, limits={"max_connections": 100, "header_timeout_s": 600}) as base, \
            _sockets() as idle:
        before = metric(base, "streamrec_connections_closed_for_room_total")
        for i in range(IDLE):
            idle.append(_connect(base))  # connects and says nothing
            if i % 100 == 99:
                assert _healthz(base) == 200, f"/healthz refused with {i + 1} idle connections held"
        assert [_healthz(base) for _ in range(5)] == [200] * 5
        assert _lookup_ok(base)
        # the oldest silent connections were closed to make room; the limit held throughout
        wait_until(lambda: _closed_by_server(idle[0]), timeout=60, what="the oldest idle connection closed")
        assert metric(base, "streamrec_connections_closed_for_room_total") - before >= IDLE - 100
        assert metric(base, "streamrec_connections_header_timeout_total") == 0


def test_past_the_limit_with_every_connection_busy_new_ones_get_503(tmp_path: Path, builder: BundleBuilder) -> None:
    limit = 10
    with serving(tmp_path, builder.root, limits={"max_connections": limit, "body_timeout_s": 600}) as base, \
            _sockets() as held:
        head = b"POST /v1/predict HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\nExpect: 100-continue\r\n\r\n"
        for _ in range(limit - 1):  # each holds a request whose body never comes
            held.append(s := _connect(base))
            s.sendall(head)
            assert s.recv(64).startswith(b"HTTP/1.1 100"), "the app reads its body: the request is in progress"
        for _ in range(5):  # nothing idle to close for room: refused at once
            with _connect(base) as s:
                s.sendall(head)
                assert s.recv(64).startswith(b"HTTP/1.1 503")
        for s in held:
            s.close()
        wait_until(lambda: _lookup_ok(base), timeout=30, what="the service answers again")


@pytest.fixture
def deadlines(tmp_path: Path, builder: BundleBuilder) -> Iterator[str]:
    with serving(tmp_path, builder.root, limits={"header_timeout_s": 1.0, "keep_alive_s": 1.0,
                                                 "body_timeout_s": 2.0}) as base:
        yield base


def test_connections_without_a_complete_head_are_closed_at_the_header_deadline(deadlines: str) -> None:
    base = deadlines
    before = metric(base, "streamrec_connections_header_timeout_total")
    with _sockets() as socks:
        socks.append(_connect(base))  # says nothing
        socks.append(_connect(base))  # a head that never ends, one header line at a time
        socks[1].sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        stop = threading.Event()

        def trickle() -> None:
            for i in range(10_000):
                if stop.wait(0.2):
                    return
                try:
                    socks[1].sendall(b"X-%d: y\r\n" % i)
                except OSError:
                    return

        t = threading.Thread(target=trickle, daemon=True)
        t.start()
        try:
            wait_until(lambda: all(_closed_by_server(s) for s in socks), timeout=60,
                       what="both connections closed at the header deadline")
        finally:
            stop.set()
            t.join(timeout=30)
    assert metric(base, "streamrec_connections_header_timeout_total") - before == 2
    assert _healthz(base) == 200 and _lookup_ok(base)


def test_an_idle_kept_alive_connection_is_closed(deadlines: str) -> None:
    base = deadlines
    with _sockets() as socks:
        socks.append(s := _connect(base))
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = s.recv(65536)
            assert chunk, head
            head += chunk
        assert head.startswith(b"HTTP/1.1 200")
        wait_until(lambda: _closed_by_server(s), timeout=60, what="the idle kept-alive connection closed")
    assert _healthz(base) == 200


def test_a_trickled_body_is_cut_off_at_the_whole_body_deadline(deadlines: str) -> None:
    base = deadlines
    before = metric(base, "streamrec_errors_total", code="request_timeout")
    body = b'{"slot": "user", "ids": [' + b" " * 1000 + b"1]}"
    with _sockets() as socks:
        socks.append(s := _connect(base))
        s.sendall(b"POST /v1/embeddings:lookup HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n" % len(body))
        stop = threading.Event()

        def trickle() -> None:  # a byte every 0.2 s: each part well within any per-part timeout
            for i in range(len(body)):
                if stop.wait(0.2):
                    return
                try:
                    s.sendall(body[i: i + 1])
                except OSError:
                    return

        t = threading.Thread(target=trickle, daemon=True)
        t.start()
        try:
            answer = b""
            while chunk := s.recv(65536):  # the server answers and closes: read to the end
                answer += chunk
        finally:
            stop.set()
            t.join(timeout=30)
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
    assert b'"code":"request_timeout"' in answer and b"not received within 2 s" in answer, answer
    assert metric(base, "streamrec_errors_total", code="request_timeout") - before == 1
    assert _lookup_ok(base)  # a body sent at once is served as before
