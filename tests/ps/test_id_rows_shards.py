"""Id-rows tables on real shard processes: routed writes keep each key's order, a killed
shard restores them from its saves (tables it only knew from writes); a table made by a write
gets its share of the shard's byte budget."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from core.errors import Conflict, ShardRestarted
from ps.admin import SaveMode
from ps.protocol import Message, Op
from ps.routing import shard_of
from ps.shard_id_rows import ShardIdRows
from ps.shard_tables import ShardTables
from tables.id_rows_kernels import ring_unroll, ring_words
from tables.id_rows_table import time_bits
from tables.table_config import TableConfig

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


@pytest.mark.process
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



def test_an_id_rows_table_made_by_a_write_gets_its_share_of_the_shard_budget() -> None:
    tables = ShardTables([TableConfig(name="emb", dim=4)], index=0, max_bytes=1 << 24)
    alone = tables.sparse["emb"].stats()["max_bytes"]
    keys = np.arange(3, dtype=np.uint64)
    msg = Message(Op.ID_ROWS_WRITE, 1, "ids.items", [keys, np.ones((3, 3), np.uint64)], {"mode": "put", "words": 3})
    ShardIdRows(tables).write(msg)
    shares = [t.stats()["max_bytes"] for t in tables.sparse.values()]
    assert None not in shares and shares[0] < alone and sum(shares) <= 1 << 24


@pytest.mark.process
def test_id_rows_on_a_disk_tier_survive_a_killed_shard(tmp_path: Path) -> None:
    """Users' histories past the shard's byte budget live on its id-rows disk tier; a base and a
    delta save hold both tiers, and a shard killed with SIGKILL comes back with every saved row."""
    users = np.arange(1, 6001, dtype=np.uint64)
    rng = np.random.default_rng(5)
    tier = {"disk": {"path": str(tmp_path / "tier")}}
    with (shard_processes(tmp_path, [EMB], n=1, shard={"max_bytes": 1_200_000}, id_rows_tier=tier) as shards,
          shards.client(timeout_s=30.0, retries=0) as c):
        want: dict[int, list[int]] = {}

        def append(keys: np.ndarray, t0: float) -> None:
            ids = rng.integers(1, 2**63, keys.shape[0]).astype(np.uint64)
            for part in np.array_split(np.arange(keys.shape[0]), max(1, keys.shape[0] // 250)):  # each fits RAM
                _append(c, keys[part], ids[part], t0 + part.astype(np.float64))
            for k, i in zip(keys.tolist(), ids.tolist(), strict=True):
                want.setdefault(k, []).insert(0, i)

        append(users, 0.0)
        c.admin.save(mode=SaveMode.BASE)
        append(rng.choice(users, 3000), 10_000.0)
        c.admin.save(mode=SaveMode.DELTA)
        saved = {k: v[:CAP] for k, v in want.items()}
        append(rng.choice(users, 500), 20_000.0)  # never saved
        st = c.admin.stats()[0]["tables"]["ids.history"]
        assert st["disk_rows"] > 1000 and st["rows"] + st["disk_rows"] == users.shape[0], st
        assert st["promoted"] > 0 and st["refused_by_budget"] == 0
        got, found = _history(c, users)
        assert found.all() and got == [want[k][:CAP] for k in users.tolist()]

        shards.kill(0)
        shards.start(0)
        shards.wait_healthy()
        with pytest.raises(ShardRestarted):
            _history(c, users[:1])
        st = c.admin.stats()[0]["tables"]["ids.history"]
        assert st["disk_rows"] > 0 and st["rows"] + st["disk_rows"] == users.shape[0], st
        got, found = _history(c, users)
        assert found.all() and got == [saved[k] for k in users.tolist()]
