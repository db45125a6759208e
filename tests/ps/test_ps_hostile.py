"""Hostile peers and faults against real shard processes: replays outside a tag
count and across a restart, oversized and junk messages, a corrupt table file in a restore."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import zmq

from core.errors import CorruptData, ShardRestarted, Unavailable
from ps import protocol
from ps.admin import SaveMode
from ps.auth import sign
from ps.protocol import Flag, Message, Op

from .ps_harness import Shards, shard_processes

pytestmark = pytest.mark.process

SECRET = b"a-test-secret-of-32-bytes-length"
IDENTITY = b"captured-client"
EMB = {"name": "emb", "dim": 8, "optimizer": {"kind": "sgd", "lr": 1.0}, "initializer": {"kind": "zeros"}}
EMB2 = {**EMB, "name": "emb2"}
KEYS = np.arange(3, dtype=np.uint64)


def _dealer(endpoint: str, identity: bytes = IDENTITY) -> zmq.Socket:
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.IDENTITY, identity)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    return sock


def _call(endpoint: str, frames: list) -> Message:
    """Send ``frames`` as they are (a captured message) as ``IDENTITY``; the shard's reply."""
    sock = _dealer(endpoint)
    try:
        sock.send_multipart(frames)
        assert sock.poll(30_000), "the shard did not answer"
        return protocol.decode(sock.recv_multipart())
    finally:
        sock.close()


def _captured_push(rid: int) -> list:
    """A signed push of +1 to KEYS' rows (sgd with lr 1 moves them by -1), as a wiretap saw it."""
    push = Message(Op.PUSH_SPARSE, rid, "emb", [KEYS, np.ones((3, 8), np.float32)])
    frames = [bytes(f) for f in protocol.encode(push, auth=True)]
    return [*frames, sign(SECRET, frames, identity=IDENTITY)]


def _first_column(shards: Shards, table: str = "emb") -> np.ndarray:
    with shards.client() as c:
        return c.wait(c.pull(table, KEYS))[:, 0]


def test_a_replay_after_more_than_65536_requests_is_refused(tmp_path: Path) -> None:
    # a window wider than the test: on a loaded machine the 65,537 requests took over 60 s, and
    # the replay was then refused for its age instead of being recognised
    with shard_processes(tmp_path, [EMB], n=1, secret=SECRET, auth={"max_skew_s": 900}) as shards:
        captured = _captured_push(1)
        assert _call(shards.endpoints[0], captured).status == protocol.STATUS_OK
        with shards.client() as c:  # 65,537 other signed requests, 2,000 in flight at a time
            one = np.zeros(1, np.uint64)
            for _ in range(65_537 // 2_000 + 1):
                for ticket in [c.pull("emb", one) for _ in range(2_000)]:
                    c.wait(ticket)
        again = _call(shards.endpoints[0], captured)
        assert again.meta["code"] == "forbidden" and "replayed" in again.meta["message"]
        np.testing.assert_array_equal(_first_column(shards), -1.0)  # applied once


def test_a_replay_to_a_restarted_shard_is_refused(tmp_path: Path) -> None:
    with shard_processes(tmp_path, [EMB], n=1, secret=SECRET) as shards:
        captured = _captured_push(1)
        assert _call(shards.endpoints[0], captured).status == protocol.STATUS_OK
        with shards.client() as c:
            c.admin.save(mode=SaveMode.BASE)  # the restarted shard comes back with the push applied
        shards.kill(0)
        shards.start(0)
        shards.wait_healthy()
        again = _call(shards.endpoints[0], captured)
        assert again.meta["code"] == "forbidden" and "before this shard started" in again.meta["message"]
        np.testing.assert_array_equal(_first_column(shards), -1.0)
        with shards.client() as c:
            assert c.admin.stats()[0]["errors"]["forbidden"] >= 1


def test_signed_resends_are_answered_and_applied_once(tmp_path: Path) -> None:
    with shard_processes(tmp_path, [EMB], n=1, secret=SECRET) as shards:
        # by hand: the original, then a RETRY resend of the same request id, signed afresh
        push = Message(Op.PUSH_SPARSE, 5, "emb", [KEYS, np.ones((3, 8), np.float32)])
        replies = []
        for flags in (Flag.NONE, Flag.RETRY):
            push.flags = flags
            frames = [bytes(f) for f in protocol.encode(push, auth=True)]
            replies.append(_call(shards.endpoints[0], [*frames, sign(SECRET, frames, identity=IDENTITY)]))
        assert [r.status for r in replies] == [protocol.STATUS_OK] * 2 and replies[1].meta == {"replayed": True}
        np.testing.assert_array_equal(_first_column(shards), -1.0)
        # through the client: the shard stops answering for a while, the client resends on its own
        proc = shards.procs[0]
        assert proc is not None
        with shards.client(timeout_s=0.5, retries=100) as c:
            os.kill(proc.pid, signal.SIGSTOP)
            resume = threading.Timer(1.5, os.kill, (proc.pid, signal.SIGCONT))
            resume.start()
            try:
                c.wait(c.push("emb", KEYS, np.ones((3, 8), np.float32)))
            finally:
                resume.join()
                os.kill(proc.pid, signal.SIGCONT)
            np.testing.assert_array_equal(c.wait(c.pull("emb", KEYS))[:, 0], -2.0)  # once, however often resent


def _peak_rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


def _until(what: str, check: Callable[[], bool], timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.05)


def test_an_oversized_message_is_dropped_before_it_is_buffered_and_counted(tmp_path: Path) -> None:
    with shard_processes(tmp_path, [EMB], n=1, secret=SECRET) as shards, shards.client() as c:
        proc = shards.procs[0]
        assert proc is not None
        stats = c.admin.stats()[0]
        limit, closed_before = stats["max_frame_bytes"], stats["connections_closed"]
        assert limit < 64 << 20  # derived from the table width and the client's limits, not 1 GiB
        peak_before = _peak_rss_bytes(proc.pid)
        sock = _dealer(shards.endpoints[0], b"attacker")
        monitor = sock.get_monitor_socket(zmq.EVENT_DISCONNECTED)
        try:
            sock.send_multipart([bytes(256 << 20)], copy=False)  # unauthenticated, 256 MB
            assert monitor.poll(60_000), "the shard kept the connection of a peer sending 256 MB"
        finally:
            sock.disable_monitor()
            monitor.close()
            sock.close()
        _until("the dropped connection is counted",
               lambda: c.admin.stats()[0]["connections_closed"] > closed_before)
        assert _peak_rss_bytes(proc.pid) - peak_before < 2 * limit  # never buffered
        np.testing.assert_array_equal(c.wait(c.pull("emb", KEYS)), 0.0)  # and it keeps serving


def test_junk_is_counted_every_time_and_logged_within_bounds(tmp_path: Path) -> None:
    with shard_processes(tmp_path, [EMB], n=1, secret=SECRET) as shards, shards.client() as c:
        log = shards.logs / "shard-0.log"
        size_before = log.stat().st_size
        before = c.admin.stats()[0]  # a start-up probe may have been refused, or left before its reply
        errors_before, dropped_before = sum(before["errors"].values()), before["replies_dropped"]
        rng = np.random.default_rng(12)
        sock = _dealer(shards.endpoints[0], b"junk-sender")
        answered = 0

        def read_reply() -> None:
            nonlocal answered
            assert sock.poll(30_000)
            assert protocol.decode(sock.recv_multipart()).status == protocol.STATUS_ERROR
            answered += 1

        try:
            for i in range(3_000):
                junk = bytes(rng.integers(0, 256, int(rng.integers(1, 200)), dtype=np.uint8))
                frames = [junk] if i % 2 else [bytes(f) for f in protocol.encode(Message(Op.PULL_SPARSE, i, "emb",
                                                                                         [KEYS]))]
                sock.send_multipart(frames)
                # at most 500 unanswered: a peer that sends without reading has replies dropped (and
                # counted) once the shard's queue to it is full (ps/shard_requests.Outbox)
                if i + 1 - answered > 500:
                    read_reply()
            while answered < 3_000:  # every junk message gets its error reply
                read_reply()
        finally:
            sock.close()
        stats = c.admin.stats()[0]
        errors = stats["errors"]
        assert sum(errors.values()) - errors_before == 3_000, errors
        assert stats["replies_dropped"] == dropped_before  # the junk sender read every reply
        np.testing.assert_array_equal(c.wait(c.pull("emb", KEYS)), 0.0)
        assert log.stat().st_size - size_before < 8_192  # 3,000 refusals: a few lines and a count


def test_a_corrupt_table_file_fails_the_whole_load_and_names_the_file(tmp_path: Path) -> None:
    with shard_processes(tmp_path, [EMB, EMB2], n=1, secret=SECRET) as shards, shards.client() as c:
        for table in ("emb", "emb2"):
            c.wait(c.push(table, KEYS, np.ones((3, 8), np.float32)))
        c.admin.save(into=str(tmp_path / "pass-1" / "shard-{shard}"), mode=SaveMode.BASE)
        for table in ("emb", "emb2"):
            c.wait(c.push(table, KEYS, np.ones((3, 8), np.float32)))
        damaged = tmp_path / "pass-1" / "shard-0" / "sparse" / "emb2" / "emb2.rows"  # the later table of two
        data = bytearray(damaged.read_bytes())
        data[len(data) // 2] ^= 0x01
        damaged.write_bytes(bytes(data))
        with pytest.raises(CorruptData, match=rf"{damaged}: checksum mismatch") as failed:
            c.admin.load(chain=[str(tmp_path / "pass-1" / "shard-{shard}")])
        assert failed.value.detail["file"] == str(damaged)
        for table in ("emb", "emb2"):  # neither table went back to the pass
            np.testing.assert_array_equal(c.wait(c.pull(table, KEYS))[:, 0], -2.0)
        assert c.admin.stats()[0]["errors"]["corrupt_data"] == 1
        c.wait(c.push("emb", KEYS, np.ones((3, 8), np.float32)))  # it keeps serving
        np.testing.assert_array_equal(c.wait(c.pull("emb", KEYS))[:, 0], -3.0)


def test_a_restart_is_reported_once_by_the_data_plane_and_a_failed_ticket_stays_failed(tmp_path: Path) -> None:
    with shard_processes(tmp_path, [EMB], n=1, secret=SECRET) as shards, shards.client() as c:
        push = c.push("emb", KEYS, np.ones((3, 8), np.float32))
        c.wait(push)
        first = c.admin.health()[0]["incarnation"]
        shards.kill(0)
        shards.start(0)
        shards.wait_healthy()
        assert c.admin.health()[0]["incarnation"] != first  # control calls go through
        pull = c.pull("emb", KEYS)
        with pytest.raises(ShardRestarted) as restarted:
            c.wait(pull)
        assert (restarted.value.shard, restarted.value.old) == (0, first)
        with pytest.raises(Unavailable, match="abandoned when an earlier wait on them failed"):
            c.wait(pull)
        np.testing.assert_array_equal(c.wait(c.pull("emb", KEYS)), 0.0)  # nothing was saved: back empty
        assert c.take_restart() is None
        shards.kill(0)  # again; a regroup reloads every shard, then takes the restart it covered
        shards.start(0)
        shards.wait_healthy()
        c.admin.health()
        taken = c.take_restart()
        assert taken is not None and taken.shard == 0
        np.testing.assert_array_equal(c.wait(c.pull("emb", KEYS)), 0.0)  # not reported again
