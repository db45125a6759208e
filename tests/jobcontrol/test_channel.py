"""The job-control channel survives hostile requests: every bad request gets an error reply and
the next good one is still answered (a thread that died made /admin/* answer 503 for good)."""

from __future__ import annotations

from typing import Any

import pytest
import zmq

from core.errors import InvalidInput, StreamrecError
from jobcontrol.channel import ControlClient, ControlServer


class _Job:
    def status(self) -> dict[str, Any]:
        return {"pass": 3}

    def passes(self) -> list[dict[str, Any]]:
        raise KeyError("pass_id")  # a handler bug: must not take the server down


def _raw_call(endpoint: str, payload: bytes) -> bytes:
    ctx = zmq.Context.instance()
    sock = ctx.socket(zmq.REQ)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVTIMEO, 10_000)
    sock.connect(endpoint)
    try:
        sock.send(payload)
        return sock.recv()
    finally:
        sock.close()


@pytest.mark.parametrize("payload", [
    b"[" * 5000 + b"]" * 5000,
    b'{"op": "status", "args": ' + b"[" * 5000 + b"]" * 5000 + b"}",
    b"\xff\xfe not json",
    b'{"op": "rollback", "args": {"pass_id": "x", "extra": 1}}',
    b'{"op": "__init__"}',
])
def test_bad_requests_get_an_error_and_the_server_keeps_answering(payload: bytes) -> None:
    server = ControlServer(_Job()).start()  # type: ignore[arg-type]
    try:
        reply = _raw_call(server.endpoint, payload)
        assert b'"ok": false' in reply
        client = ControlClient(server.endpoint, timeout_s=10)
        assert client.call("status") == {"pass": 3}
        client.close()
    finally:
        server.stop()


def test_deep_json_is_named_and_a_handler_bug_is_an_internal_error() -> None:
    server = ControlServer(_Job()).start()  # type: ignore[arg-type]
    client = ControlClient(server.endpoint, timeout_s=10)
    try:
        assert b"nested too deeply" in _raw_call(server.endpoint, b"[" * 5000 + b"]" * 5000)
        with pytest.raises(StreamrecError, match="KeyError"):
            client.call("passes")
        with pytest.raises(InvalidInput, match="bad control request"):
            client.call("status", verbose=True)  # an argument the op does not take
        assert client.call("status") == {"pass": 3}
    finally:
        client.close()
        server.stop()
