"""Fuzzing the PS wire against a real shard process: random frames and mutated
valid requests (bytes flipped, inserted, cut; frames dropped, doubled, swapped), sent unsigned
and, when what they decode to is harmless, signed afresh with the shard's secret, so the
decoder and the handlers behind the MAC are reached too. Every message gets an error reply (or
a plain answer, for a mutation that stayed a valid read), never an internal error; the shard
keeps serving, the rows it held are unchanged and its memory stays bounded. Bounded by
hypothesis' ``max_examples``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import zmq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.errors import InvalidInput
from ps import protocol
from ps.auth import sign
from ps.protocol import Flag, Message, Op

from .ps_harness import shard_processes

pytestmark = pytest.mark.process

SECRET = b"wire-fuzz-secret-of-32-bytes-len"
IDENTITY = b"fuzzing-client"
EMB = {"name": "emb", "dim": 8, "optimizer": {"kind": "sgd", "lr": 1.0}, "initializer": {"kind": "zeros"}}
SCRATCH = {**EMB, "name": "scratch"}
KEYS = np.arange(1, 65, dtype=np.uint64)
REPLY_TIMEOUT_MS = 60_000  # a loaded machine is slow; a reply that never comes fails the test
RSS_GROWTH_MB = 200
# Requests a signed fuzzer may send: reads, and pushes to the scratch table only. Any other op
# (STOP, LOAD, SAVE, SHRINK, POLICY, LEASE, ...) or a push to the watched table goes unsigned.
HARMLESS = {Op.PULL_SPARSE, Op.PULL_DENSE, Op.STATS, Op.HEALTH, Op.PUSH_SPARSE, Op.PUSH_DENSE}


def _frames(msg: Message) -> list[bytes]:
    return [bytes(f) for f in protocol.encode(msg, auth=True)]


BIG = np.arange(1, 5000, dtype=np.uint64)  # its own frame (past the inline limit)
BASES = [
    _frames(Message(Op.PULL_SPARSE, 11, "emb", [KEYS[:4]])),
    _frames(Message(Op.PULL_SPARSE, 12, "emb", [BIG])),
    _frames(Message(Op.PULL_SPARSE, 13, "emb", [KEYS[:4]], flags=Flag.EXISTING)),
    _frames(Message(Op.PUSH_SPARSE, 14, "scratch", [KEYS[:3], np.ones((3, 8), np.float32)])),
    _frames(Message(Op.PUSH_SPARSE, 15, "emb", [KEYS[:3], np.ones((3, 8), np.float32)])),
    _frames(Message(Op.PUSH_DENSE, 16, "mlp.w0", [np.ones(16, np.float32)])),
    _frames(Message(Op.HEALTH, 17)),
    _frames(Message(Op.STATS, 18)),
    _frames(Message(Op.POLICY, 19, meta={"table": "emb", "dry_run": True})),
    _frames(Message(Op.STOP, 20)),
]


@st.composite
def mutated(draw: st.DrawFn) -> list[bytes]:
    frames = [bytearray(f) for f in draw(st.sampled_from(BASES))]
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "insert", "delete", "cut", "dup", "drop_frame", "dup_frame", "swap",
                                   "add_frame"]))
        f = frames[draw(st.integers(0, len(frames) - 1))] if frames else bytearray()
        i = draw(st.integers(0, max(len(f) - 1, 0)))
        if op == "flip" and f:
            f[i] = draw(st.integers(0, 255))
        elif op == "insert":
            f[i:i] = draw(st.binary(min_size=1, max_size=16))
        elif op == "delete":
            del f[i : i + draw(st.integers(1, 16))]
        elif op == "cut":
            del f[i:]
        elif op == "dup":
            f[i:i] = f[i : i + draw(st.integers(1, 64))]
        elif op == "drop_frame" and len(frames) > 1:
            frames.pop(draw(st.integers(0, len(frames) - 1)))
        elif op == "dup_frame":
            frames.append(bytearray(f))
        elif op == "swap" and len(frames) > 1:
            frames.reverse()
        else:
            frames.append(bytearray(draw(st.binary(max_size=64))))
    return [bytes(f) for f in frames]


junk = st.lists(st.binary(max_size=120), min_size=1, max_size=4)


def _harmless(frames: list[bytes]) -> bool:
    """True when the frames (the auth frame last) decode to nothing that changes the watched rows or the shard's state
    (undecodable frames are harmless: the shard refuses them after checking the signature)."""
    try:
        msg = protocol.decode(frames)
    except InvalidInput:
        return True
    return msg.op in HARMLESS and not (msg.op == Op.PUSH_SPARSE and msg.table != "scratch")


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for {pid}")


def test_random_and_mutated_frames_get_error_replies_and_change_nothing(tmp_path: Path) -> None:
    with shard_processes(tmp_path, [EMB, SCRATCH], n=1, secret=SECRET) as shards:
        with shards.client() as c:  # rows to watch: pushed once, with distinct values
            c.wait(c.push("emb", KEYS, np.arange(KEYS.size * 8, dtype=np.float32).reshape(-1, 8)))
            before = c.wait(c.pull("emb", KEYS))
        pid = shards.procs[0].pid
        rss_before = _rss_mb(pid)
        sock = zmq.Context.instance().socket(zmq.DEALER)
        sock.setsockopt(zmq.IDENTITY, IDENTITY)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(shards.endpoints[0])
        codes: dict[str, int] = {}

        @settings(max_examples=1000, deadline=None, derandomize=True,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
        @given(frames=st.one_of(mutated(), junk), signed=st.sampled_from([True, True, True, False]))
        def run(frames: list[bytes], signed: bool) -> None:
            sent = [*frames, sign(SECRET, frames, identity=IDENTITY)]
            signed = signed and _harmless(sent)
            sent = sent if signed else frames
            sock.send_multipart(sent)
            assert sock.poll(REPLY_TIMEOUT_MS), ("no reply", shards.procs[0].poll(), signed, sent)
            reply = protocol.decode(sock.recv_multipart())  # every reply is a valid message
            if reply.status == protocol.STATUS_ERROR:
                code = reply.meta["code"]
                assert code != "internal_error", (reply.meta, signed, sent)  # a handler failed on it: a bug
                if not signed:
                    assert code in ("unauthorized", "forbidden"), (reply.meta, sent)
                codes[code] = codes.get(code, 0) + 1
            else:
                assert signed, ("an unsigned request was served", sent)
                codes["ok"] = codes.get("ok", 0) + 1

        try:
            run()
        finally:
            sock.close()
        assert shards.procs[0].poll() is None, "the shard died"
        assert codes.get("unauthorized", 0) > 20 and codes.get("invalid_input", 0) > 20, codes
        with shards.client() as c:  # still serving, rows unchanged
            c.admin.health()
            np.testing.assert_array_equal(c.wait(c.pull("emb", KEYS)), before)
            errors = c.admin.stats()[0]["errors"]
        assert sum(errors.values()) >= sum(n for k, n in codes.items() if k != "ok"), (errors, codes)
        grown = _rss_mb(pid) - rss_before
        assert grown < RSS_GROWTH_MB, f"shard RSS grew by {grown:.0f} MB"
        print(codes)
