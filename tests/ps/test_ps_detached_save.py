"""Two-phase saves on real shard processes: a DETACH save answers at the consistent point of
every table while the shard writes on; SAVE_WAIT collects the entries or the error."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import zmq

from core.errors import Conflict, NotFound, StreamrecError, error_from_code
from ps import protocol
from ps.admin import SaveMode
from ps.protocol import Flag, Message, Op

from .ps_harness import shard_processes

pytestmark = pytest.mark.process

EMB = {"name": "emb", "dim": 8, "optimizer": {"kind": "sgd", "lr": 1.0}, "initializer": {"kind": "zeros"},
       "initial_capacity": 1 << 20}
WIDE = {"name": "wide", "dim": 2, "optimizer": {"kind": "sgd", "lr": 1.0}, "initializer": {"kind": "zeros"}}
ROWS = 1_500_000  # ~100 MB per shard: writing and fsyncing it takes far longer than one loopback round trip


def _push(c, keys: np.ndarray, table: str = "emb", width: int = 8) -> None:
    for a in range(0, keys.shape[0], 1 << 18):
        part = keys[a : a + (1 << 18)]
        c.wait(c.push(table, part, np.ones((part.shape[0], width), np.float32)))


def _detached_save_then_another(endpoint: str, first: str, second: str) -> tuple[dict, Message]:
    """A DETACH base save into ``first`` and, queued right behind it on the same connection, a
    plain save into ``second``: the shard's loop takes the second while the first surely writes
    (a second save sent after the first's reply found the write done on a loaded machine)."""
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    try:
        for rid, where, flags in ((1, first, Flag.DETACH), (2, second, Flag.NONE)):
            meta = {"mode": "base", "cursor": "checkpoint", "dir": where}
            sock.send_multipart(protocol.encode(Message(Op.SAVE, rid, meta=meta, flags=flags)))
        replies: dict[int, Message] = {}
        while len(replies) < 2:
            assert sock.poll(120_000), "the shard did not answer"
            reply = protocol.decode(sock.recv_multipart())
            replies[reply.request_id] = reply
    finally:
        sock.close()
    assert replies[1].status == protocol.STATUS_OK, replies[1].meta
    return replies[1].meta, replies[2]


def test_a_detached_save_holds_the_tables_as_of_its_reply(tmp_path: Path) -> None:
    keys = np.arange(1, ROWS + 1, dtype=np.uint64)
    few = keys[:5000]
    with shard_processes(tmp_path, [EMB, WIDE]) as shards, shards.client(timeout_s=60, retries=0) as c:
        _push(c, keys)
        _push(c, few, "wide", 2)
        c.init_dense("dense", np.zeros(10, np.float32))
        one = str(tmp_path / "pass-1" / "shard-{shard}")
        other = str(tmp_path / "other" / "shard-{shard}")
        started = [_detached_save_then_another(ep, one.format(shard=i), other.format(shard=i))
                   for i, ep in enumerate(shards.endpoints)]
        saves = [meta for meta, _ in started]
        assert [s["mode"] for s in saves] == ["base", "base"] and not any("manifest" in s for s in saves)
        for _, refused in started:
            with pytest.raises(Conflict, match=r"shard \d: a save is already running \(base on cursor 'checkpoint' "
                                               r"into .*pass-1/shard-\d.*save_wait"):
                raise error_from_code(refused.meta.get("code", "?"), refused.meta.get("message", "?"))
        # after the reply: in the tables, in neither this save nor its dense copy
        _push(c, few)
        _push(c, few, "wide", 2)
        c.wait(c.push_dense("dense", np.ones(10, np.float32)))
        entries = c.admin.save_wait(saves)
        assert [e["save"] for e in entries] == [s["save"] for s in saves]
        assert all(e["manifest"]["file"] == "shard.json" and e["dir"] == one.format(shard=i)
                   for i, e in enumerate(entries))
        assert c.admin.save_wait(saves) == entries  # collected again: the same answer
        assert all(w["idle"] for w in c.admin.save_wait())  # nothing runs now

        two = str(tmp_path / "pass-2" / "shard-{shard}")
        delta = c.admin.save(into=two, mode=SaveMode.DELTA, detach=True)
        _push(c, few)  # again after the consistent point
        assert [e["mode"] for e in c.admin.save_wait(delta)] == ["delta", "delta"]

        c.admin.load(chain=[one])
        np.testing.assert_array_equal(c.wait(c.pull("emb", few)), -1.0)
        np.testing.assert_array_equal(c.wait(c.pull("wide", few)), -1.0)
        np.testing.assert_array_equal(c.wait(c.pull_dense("dense")), 0.0)
        c.admin.load(chain=[one, two])
        np.testing.assert_array_equal(c.wait(c.pull("emb", few)), -2.0)
        np.testing.assert_array_equal(c.wait(c.pull("emb", keys[-5:])), -1.0)


def test_a_written_save_stays_collectable_after_a_newer_one(tmp_path: Path) -> None:
    keys = np.arange(1, 2001, dtype=np.uint64)
    with shard_processes(tmp_path, [WIDE]) as shards, shards.client(timeout_s=30, retries=0) as c:
        _push(c, keys, "wide", 2)
        first = c.admin.save(into=str(tmp_path / "a" / "shard-{shard}"), mode=SaveMode.BASE, detach=True)
        assert all(w["idle"] for w in c.admin.save_wait())  # written
        newer = c.admin.save(into=str(tmp_path / "b" / "shard-{shard}"), mode=SaveMode.DELTA)
        got = c.admin.save_wait(first)
        assert [e["save"] for e in got] == [s["save"] for s in first]
        assert [e["mode"] for e in got] == ["base", "base"] and [e["mode"] for e in newer] == ["delta", "delta"]


def test_a_failed_background_write_surfaces_at_the_wait(tmp_path: Path) -> None:
    keys = np.arange(1, 2001, dtype=np.uint64)
    with shard_processes(tmp_path, [WIDE]) as shards, shards.client(timeout_s=30, retries=0) as c:
        _push(c, keys, "wide", 2)
        c.admin.save(into=str(tmp_path / "ok" / "shard-{shard}"), mode=SaveMode.BASE)  # a synchronous save still works
        blocker = tmp_path / "bad" / "shard-1" / "sparse" / "wide"
        blocker.parent.mkdir(parents=True)
        blocker.write_text("a file where the table's directory goes")
        saves = c.admin.save(into=str(tmp_path / "bad" / "shard-{shard}"), mode=SaveMode.DELTA, detach=True)
        with pytest.raises(StreamrecError, match=r"shard 1: save into .*bad/shard-1 failed: FileExistsError"):
            c.admin.save_wait(saves)
        with pytest.raises(NotFound, match=r"shard 0: save 'nope' is unknown"):
            c.admin.save_wait([{"save": "nope"}, saves[1]])
        # the shard serves on; its broken chain restarts with a base
        entries = c.admin.save(into=str(tmp_path / "next" / "shard-{shard}"), mode=SaveMode.DELTA)
        assert [e["mode"] for e in entries] == ["delta", "base"]
        np.testing.assert_array_equal(c.wait(c.pull("wide", keys[:3])), -1.0)
