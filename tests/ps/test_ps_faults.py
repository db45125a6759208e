"""Bad frames, missing or wrong credentials, and a shard killed with SIGKILL."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest
import zmq

from core.errors import ConfigError, Forbidden, InvalidInput, NotFound, ShardRestarted, Unauthorized, Unavailable
from ps import protocol
from ps.admin import SaveMode
from ps.auth import sign
from ps.client import PSClient
from ps.protocol import Message, Op
from ps.ps_config import ClientConfig, PSConfig
from ps.shard_server import ShardServer

from .ps_harness import shard_processes

SECRET = b"a-test-secret-of-32-bytes-length"
IDENTITY = b"raw-test-client"
EMB = {"name": "emb", "dim": 8, "optimizer": {"kind": "sgd", "lr": 1.0}, "initializer": {"kind": "zeros"}}


def _raw_call(endpoint: str, frames: list, *, secret: bytes | None = SECRET, timeout_ms: int = 5000) -> Message:
    """Send raw frames (signed unless ``secret`` is None) as client ``IDENTITY`` and decode the shard's reply."""
    ctx = zmq.Context.instance()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.IDENTITY, IDENTITY)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    try:
        sock.send_multipart(frames if secret is None else [*frames, sign(secret, frames, identity=IDENTITY)])
        assert sock.poll(timeout_ms), "the shard did not answer"
        return protocol.decode(sock.recv_multipart())
    finally:
        sock.close()


def _signed_request(msg: Message) -> list:
    return [bytes(f) for f in protocol.encode(msg, auth=True)]


@pytest.mark.process
def test_bad_frames_get_named_errors_and_the_shard_keeps_serving(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    with shard_processes(tmp_path, [EMB], n=1, secret=SECRET) as shards:
        ep = shards.endpoints[0]
        keys = np.arange(10, dtype=np.uint64)
        cases: dict[str, tuple[list, bytes | None, str]] = {}
        good = _signed_request(Message(Op.PULL_SPARSE, 7, "emb", [np.arange(4096, dtype=np.uint64)]))
        small = _signed_request(Message(Op.PULL_SPARSE, 8, "emb", [keys]))  # keys inside the header frame
        cases["unauthenticated"] = ([bytes(f) for f in protocol.encode(Message(Op.PULL_SPARSE, 1, "emb", [keys]))],
                                    None, "unauthorized")
        cases["wrong secret"] = (good, b"another-secret-of-enough-bytes!!", "forbidden")
        cases["truncated array"] = ([good[0], good[1][:-8]], SECRET, "invalid_input")
        cases["missing array frame"] = ([good[0]], SECRET, "invalid_input")
        cases["truncated header"] = ([good[0][:10]], SECRET, "unauthorized")  # auth is checked first
        cases["truncated inline array"] = ([small[0][:-8]], SECRET, "invalid_input")
        bad_version = bytearray(good[0])
        bad_version[4] = protocol.VERSION + 1
        cases["other version"] = ([bytes(bad_version), good[1]], SECRET, "invalid_input")
        cases["unknown table"] = (_signed_request(Message(Op.PULL_SPARSE, 2, "nope", [keys])), SECRET, "not_found")
        cases["float keys"] = (_signed_request(Message(Op.PULL_SPARSE, 3, "emb", [keys.astype(np.float32)])),
                               SECRET, "invalid_input")
        cases["wrong grad width"] = (_signed_request(Message(Op.PUSH_SPARSE, 4, "emb",
                                                             [keys, np.ones((10, 3), np.float32)])),
                                     SECRET, "invalid_input")
        cases["grads as float64"] = (_signed_request(Message(Op.PUSH_SPARSE, 5, "emb",
                                                             [keys, np.ones((10, 8), np.float64)])),
                                     SECRET, "invalid_input")
        for name, (frames, secret, code) in cases.items():
            reply = _raw_call(ep, frames, secret=secret)
            assert reply.status == protocol.STATUS_ERROR, name
            assert reply.meta["code"] == code, (name, reply.meta)
            assert reply.meta["message"], name
        for _ in range(200):  # fuzz: random frames, random header bytes behind a valid prefix
            junk = [rng.bytes(int(rng.integers(0, 64))) for _ in range(int(rng.integers(1, 4)))]
            if rng.random() < 0.5:
                junk[0] = good[0][: int(rng.integers(0, len(good[0])))] + junk[0]
            reply = _raw_call(ep, junk)
            assert reply.status == protocol.STATUS_ERROR
        # the shard still serves authenticated clients, unchanged by all of the above
        with shards.client() as c:
            np.testing.assert_array_equal(c.wait(c.pull("emb", keys)), np.zeros((10, 8), np.float32))
            c.wait(c.push("emb", keys, np.ones((10, 8), np.float32)))
            np.testing.assert_array_equal(c.wait(c.pull("emb", keys)), -np.ones((10, 8), np.float32))
            stats = c.admin.stats()[0]
        assert stats["errors"]["unauthorized"] >= 1 and stats["errors"]["forbidden"] >= 1
        assert stats["errors"]["invalid_input"] >= 6 and stats["errors"]["not_found"] == 1
        # client-side errors name the problem too
        quick = ClientConfig(timeout_s=5, retries=0)
        with PSClient(shards.endpoints, config=quick) as anonymous, pytest.raises(Unauthorized, match="requires auth"):
            anonymous.wait(anonymous.pull("emb", keys))
        with PSClient(shards.endpoints, secret=b"x" * 32, config=quick) as wrong, pytest.raises(Forbidden, match="sig"):
            wrong.wait(wrong.pull("emb", keys))
        with shards.client() as c:
            with pytest.raises(NotFound, match="no sparse table 'nope'"):
                c.wait(c.pull("nope", keys))
            with pytest.raises(InvalidInput, match="uint64"):
                c.wait(c.pull("emb", keys.astype(np.int64)))


@pytest.mark.process
def test_replayed_request_is_refused(tmp_path: Path) -> None:
    with shard_processes(tmp_path, [EMB], n=1, secret=SECRET) as shards:
        frames = _signed_request(Message(Op.PUSH_SPARSE, 9, "emb", [np.arange(3, dtype=np.uint64),
                                                                   np.ones((3, 8), np.float32)]))
        tagged = [*frames, sign(SECRET, frames, identity=IDENTITY)]
        assert _raw_call(shards.endpoints[0], tagged, secret=None).status == protocol.STATUS_OK
        again = _raw_call(shards.endpoints[0], tagged, secret=None)
        assert again.meta["code"] == "forbidden" and "replay" in again.meta["message"]
        with shards.client() as c:
            np.testing.assert_array_equal(c.wait(c.pull("emb", np.arange(3, dtype=np.uint64)))[:, 0], -1.0)


@pytest.mark.process
def test_a_retried_push_is_applied_once(tmp_path: Path) -> None:
    with shard_processes(tmp_path, [EMB], n=1) as shards:
        push = Message(Op.PUSH_SPARSE, 77, "emb", [np.arange(3, dtype=np.uint64), np.ones((3, 8), np.float32)])
        ctx = zmq.Context.instance()
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.IDENTITY, b"retrying-client")
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(shards.endpoints[0])
        try:
            for flags in (protocol.Flag.NONE, protocol.Flag.RETRY, protocol.Flag.NONE):  # and a late original
                push.flags = flags
                sock.send_multipart(protocol.encode(push))
                assert sock.poll(5000)
                assert protocol.decode(sock.recv_multipart()).status == protocol.STATUS_OK
        finally:
            sock.close()
        # Without a routing id libzmq names a connection "\0" + 4 bytes, as it renames the old
        # connection of a client that reconnected under its id: requests queued there would come
        # under a name the replay cache does not know, beside their resends. Such a push is refused.
        anonymous = ctx.socket(zmq.DEALER)
        anonymous.setsockopt(zmq.LINGER, 0)
        anonymous.connect(shards.endpoints[0])
        try:
            replies = []
            for msg in (Message(Op.PUSH_SPARSE, 77, "emb", push.arrays), Message(Op.PULL_SPARSE, 78, "emb",
                                                                                 push.arrays[:1])):
                anonymous.send_multipart(protocol.encode(msg))
                assert anonymous.poll(5000)
                replies.append(protocol.decode(anonymous.recv_multipart()))
        finally:
            anonymous.close()
        assert replies[0].meta["code"] == "invalid_input" and "routing id" in replies[0].meta["message"]
        assert replies[1].status == protocol.STATUS_OK  # reads need no id
        with shards.client() as c:
            np.testing.assert_array_equal(c.wait(c.pull("emb", np.arange(3, dtype=np.uint64)))[:, 0], -1.0)


def test_listening_off_loopback_needs_a_secret() -> None:
    with pytest.raises(ConfigError, match="without authentication"):
        ShardServer(PSConfig(), index=0, endpoint="tcp://0.0.0.0:1")


@pytest.mark.process
def test_killed_shard_raises_a_clear_error_then_comes_back_from_its_checkpoint(tmp_path: Path) -> None:
    keys = np.arange(1000, dtype=np.uint64)
    # a 1 s timeout failed live requests on a loaded 2-core machine: the kill is the only silence here
    with shard_processes(tmp_path, [EMB]) as shards, shards.client(timeout_s=6.0, retries=0) as c:
        c.wait(c.push("emb", keys, np.ones((1000, 8), np.float32)))
        c.admin.save(mode=SaveMode.BASE)
        c.wait(c.push("emb", keys, np.ones((1000, 8), np.float32)))
        c.admin.save(mode=SaveMode.DELTA)
        c.wait(c.push("emb", keys, np.ones((1000, 8), np.float32)))  # never saved
        shards.kill(1)
        with pytest.raises(Unavailable, match=rf"shard 1 at {shards.endpoints[1]} did not answer"):
            c.wait(c.pull("emb", keys))
        shards.start(1)
        shards.wait_healthy()
        with pytest.raises(ShardRestarted, match=r"shard 1 at .* restarted \(incarnation") as restarted:
            c.wait(c.pull("emb", keys))  # the same client reconnects, and hears of the restart once
        assert restarted.value.shard == 1 and restarted.value.old != restarted.value.new
        rows = c.wait(c.pull("emb", keys))
        on_1 = np.asarray([s == 1 for s in _shards_of(keys)])
        np.testing.assert_array_equal(rows[on_1], -2.0)  # both saves restored, the unsaved push lost
        np.testing.assert_array_equal(rows[~on_1], -3.0)
        assert c.admin.stats()[1]["restored_from"].endswith("000002-delta")
        # saves the client names (a trainer's pass directories) on the checkpoint cursor count too
        c.admin.save(into=str(tmp_path / "pass-1" / "shard-{shard}"), mode=SaveMode.DELTA)  # a base after the restart
        c.wait(c.push("emb", keys, np.ones((1000, 8), np.float32)))
        c.admin.save(into=str(tmp_path / "pass-2" / "shard-{shard}"), mode=SaveMode.DELTA)
        c.wait(c.push("emb", keys, np.ones((1000, 8), np.float32)))  # never saved
        shards.kill(1)
        shards.start(1)
        shards.wait_healthy()
        with pytest.raises(ShardRestarted):
            c.wait(c.pull("emb", keys))
        rows = c.wait(c.pull("emb", keys))
        np.testing.assert_array_equal(rows[on_1], -3.0)
        np.testing.assert_array_equal(rows[~on_1], -5.0)
        assert c.admin.stats()[1]["restored_from"] == str(tmp_path / "pass-2" / "shard-1")
        assert not list((shards.checkpoints / "shard-001").glob("0000*"))  # superseded numbered saves pruned


def _shards_of(keys: np.ndarray) -> np.ndarray:
    from ps.routing import shard_of

    return shard_of(keys, 2)


def test_protocol_refuses_a_header_with_trailing_garbage() -> None:
    frames = [bytes(f) for f in protocol.encode(Message(Op.HEALTH, 1))]
    with pytest.raises(InvalidInput, match="header is"):
        protocol.decode([frames[0] + b"x"])
    head = bytearray(frames[0])
    struct.pack_into("<B", head, 5, 99)  # op
    with pytest.raises(InvalidInput, match="unknown op 99"):
        protocol.decode([bytes(head)])
