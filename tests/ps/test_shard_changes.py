"""The changed-keys log (tables.change_log) and the CHANGES op that reads it from a real shard:
idle until read, every push's kept keys in order after a cursor, a reset when the cursor is
lost (ring wrapped, table loaded from a save)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tables.change_log import ChangeLog
from tables.sparse_table import SparseTable
from tables.table_config import TableConfig

from .ps_harness import shard_processes

EMB = {"name": "emb", "dim": 4, "optimizer": {"kind": "sgd", "lr": 1.0}}


def test_log_is_idle_until_read_then_follows_pushes_and_resets_on_wrap_and_load(tmp_path: Path) -> None:
    t = SparseTable(TableConfig(name="t", dim=2))
    t.push(np.array([1, 2], np.uint64), np.ones((2, 2), np.float32))
    first = t.changes.read(0, 0, 100)
    assert first.reset and first.keys.size == 0 and first.seq == 0, "inactive log recorded nothing"
    t.push(np.array([5, 3, 5], np.uint64), np.ones((3, 2), np.float32))
    t.push(np.array([9], np.uint64), np.ones((1, 2), np.float32))
    got = t.changes.read(first.generation, first.seq, 100)
    assert not got.reset and sorted(got.keys.tolist()) == [3, 5, 9] and got.seq == 3
    part = t.changes.read(first.generation, 0, 2)
    assert part.seq == 2 and part.keys.size == 2, "limit bounds a read; the cursor says where to go on"
    t.save(tmp_path / "s")
    t.load(tmp_path / "s")
    after = t.changes.read(got.generation, got.seq, 100)
    assert after.reset and after.generation != got.generation, "a load starts a new generation"

    log = ChangeLog(capacity=4)
    c = log.read(0, 0, 10)
    log.record(np.arange(6, dtype=np.uint64), now=1.0)
    wrapped = log.read(c.generation, c.seq, 10)
    assert wrapped.reset and wrapped.keys.tolist() == [2, 3, 4, 5] and wrapped.seq == 6


@pytest.mark.process
def test_changes_op_lists_keys_per_shard_after_the_cursor(tmp_path: Path) -> None:
    with shard_processes(tmp_path, [EMB], n=2) as shards, shards.client() as c:
        start = c.wait(c.changes("emb", [(0, 0), (0, 0)], limit=100))
        cursors = [(x.generation, x.seq) for x in start]
        keys = np.arange(1, 41, dtype=np.uint64)
        c.wait(c.push("emb", keys, np.ones((40, 4), np.float32)))
        got = c.wait(c.changes("emb", cursors, limit=100))
        assert not any(x.reset for x in got)
        assert sorted(np.concatenate([x.keys for x in got]).tolist()) == keys.tolist()
        assert all(x.times.shape == x.keys.shape for x in got)
        again = c.wait(c.changes("emb", [(x.generation, x.seq) for x in got], limit=100))
        assert sum(x.keys.size for x in again) == 0
        mixed = np.concatenate([keys | np.uint64(1 << 56), keys[:10] | np.uint64(2 << 56)])
        c.wait(c.push("emb", mixed, np.ones((50, 4), np.float32)))
        cursors = [(x.generation, x.seq) for x in again]
        items = c.wait(c.changes("emb", cursors, limit=100, slot=2))
        want = sorted((keys[:10] | np.uint64(2 << 56)).tolist())
        assert sorted(np.concatenate([x.keys for x in items]).tolist()) == want
        assert sum(x.seq - cur[1] for x, cur in zip(items, cursors, strict=True)) == 50, "past the other slots' keys"
        watch = c.wait(c.changes("emb", cursors, limit=1, slot=-1))
        assert all(x.keys.size == 0 and x.seq == y.seq for x, y in zip(watch, items, strict=True)), "watch: to the end"
