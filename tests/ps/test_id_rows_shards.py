"""Id-rows tables on real shard processes: routed writes keep each key's order, a killed
shard restores them from its saves (tables it only knew from writes), a retried write applies once."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from core.errors import Conflict, ShardRestarted
from ps.admin import SaveMode
from ps.routing import shard_of
from tables.id_rows_kernels import ring_unroll, ring_words
from tables.id_rows_table import time_bits

from .ps_harness import shard_processes

EMB = {"name": "emb", "dim": 4, "optimizer": {"kind": "sgd", "lr": 1.0}, "initializer": {"kind": "zeros"}}
CAP = 5
WORDS = ring_words(CAP)


def _append(c, keys, ids, times):
    c.wait(c.write_id_rows("ids.history", keys, [ids, time_bits(times)], mode="append", words=WORDS))


def _history(c, keys):
    rows, found = c.wait(c.read_id_rows("ids.history", keys, words=WORDS))
    ids, _, lengths = ring_unroll(rows)
    return [ids[i, : lengths[i]].tolist() for i in range(keys.shape[0])], found


def test_history_and_catalogue_rows_survive_a_killed_shard(tmp_path: Path) -> None:
    users = np.arange(1, 41, dtype=np.uint64)
    rng = np.random.default_rng(3)
    with shard_processes(tmp_path, [EMB]) as shards, shards.client() as c:
        want: dict[int, list[int]] = {}

        def append(n: int, t0: float) -> None:
            keys = rng.choice(users, n)
            ids = rng.integers(1, 2**63, n).astype(np.uint64)
            _append(c, keys, ids, t0 + np.arange(n, dtype=np.float64))
            for k, i in zip(keys.tolist(), ids.tolist(), strict=True):
                want.setdefault(k, []).insert(0, i)

        append(300, 0.0)
        items = np.array([11, 12, 13], np.uint64)
        c.wait(c.write_id_rows("ids.items", items, [np.arange(9, dtype=np.uint64).reshape(3, 3)], mode="put", words=3))
        got, found = _history(c, np.r_[users, 999].astype(np.uint64))
        assert got == [want.get(k, [])[:CAP] for k in users.tolist()] + [[]] and not found[-1]
        c.admin.save(mode=SaveMode.BASE)
        append(100, 1000.0)
        c.admin.save(mode=SaveMode.DELTA)
        saved = {k: v[:CAP] for k, v in want.items()}
        append(100, 2000.0)  # never saved
        shards.kill(1)
        shards.start(1)
        shards.wait_healthy()
        with pytest.raises(ShardRestarted):
            _history(c, users)
        got, _ = _history(c, users)
        on_1 = shard_of(users, 2) == 1
        for k, h, one in zip(users.tolist(), got, on_1, strict=True):
            assert h == (saved.get(k, []) if one else want.get(k, [])[:CAP])
        rows, found = c.wait(c.read_id_rows("ids.items", items, words=3))
        assert found.all() and rows.tolist() == [[0, 1, 2], [3, 4, 5], [6, 7, 8]]
        with pytest.raises(Conflict):  # one layout per table
            c.wait(c.read_id_rows("ids.items", items, words=4))

