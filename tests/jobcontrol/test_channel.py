"""The job-control channel survives hostile requests: every bad request gets an error reply and
the next good one is still answered (a thread that died made /admin/* answer 503 for good)."""

from __future__ import annotations

from typing import Any

import pytest
import zmq

from core.errors import ConfigError, Forbidden, InvalidInput, StreamrecError, Unauthorized
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
    server = ControlServer(_Job()).start()
    try:
        reply = _raw_call(server.endpoint, payload)
        assert b'"ok": false' in reply
        client = ControlClient(server.endpoint, timeout_s=10)
        assert client.call("status") == {"pass": 3}
        client.close()
    finally:
        server.stop()


def test_deep_json_is_named_and_a_handler_bug_is_an_internal_error() -> None:
    server = ControlServer(_Job()).start()
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


SECRET = b"job-control-test-secret-0123456789"


def test_a_secret_holding_server_answers_only_signed_requests() -> None:
    server = ControlServer(_Job(), secret=SECRET).start()
    signed = ControlClient(server.endpoint, timeout_s=10, secret=SECRET)
    unsigned = ControlClient(server.endpoint, timeout_s=10)
    wrong = ControlClient(server.endpoint, timeout_s=10, secret=b"another-secret-of-enough-bytes")
    try:
        assert signed.call("status") == {"pass": 3}
        with pytest.raises(Unauthorized):
            unsigned.call("status")
        with pytest.raises(Forbidden):
            wrong.call("status")
        assert signed.call("status") == {"pass": 3}  # refusals cost nothing to the signed client
    finally:
        for c in (signed, unsigned, wrong):
            c.close()
        server.stop()


def test_a_captured_signed_request_cannot_be_replayed() -> None:
    from jobcontrol.channel import CONTROL_IDENTITY
    from ps.auth import sign

    server = ControlServer(_Job(), secret=SECRET).start()
    try:
        payload = b'{"op": "status", "args": {}}'
        frames = [payload, sign(SECRET, [payload], identity=CONTROL_IDENTITY)]
        ctx = zmq.Context.instance()
        replies = []
        for _ in range(2):
            sock = ctx.socket(zmq.REQ)
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.RCVTIMEO, 10_000)
            sock.connect(server.endpoint)
            sock.send_multipart(frames)
            replies.append(sock.recv())
            sock.close()
        assert b'"ok": true' in replies[0] and b"replayed request refused" in replies[1]
    finally:
        server.stop()


def test_job_control_off_loopback_needs_a_secret() -> None:
    with pytest.raises(ConfigError, match="without authentication"):
        ControlServer(_Job(), "tcp://0.0.0.0:0")
    server = ControlServer(_Job(), "tcp://0.0.0.0:0", secret=SECRET)
    server.stop()
