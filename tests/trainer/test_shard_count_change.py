"""A pass restored by another number of PS shards than wrote it: the virtual shards are placed
anew and every row (values, optimizer state), admission count and tombstone comes back exactly
once, on the shard the new placement names; a placement that cannot be satisfied is refused."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from core.errors import Conflict
from ps.admin import SaveMode
from ps.client import PSClient
from ps.routing import shard_of
from ps.shard_replace import replay
from ps.shard_saves import restore_plan
from ps.shard_tables import ShardTables
from tables.table_config import TableConfig
from tests.ps.ps_harness import shard_processes
from trainer import checkpoints
from trainer.metrics import Metrics
from trainer.pass_commit import CommitFinisher, finish_pass
from trainer.recovery import restore

TABLE = {"name": "emb", "dim": 4, "optimizer": {"kind": "adagrad", "lr": 0.1}, "initializer": {"kind": "normal"},
         "admission": {"policy": "count", "min_count": 2, "sketch_width": 1 << 16, "sketch_depth": 2},
         "eviction": {"ttl_passes": 0}}
KEYS = np.arange(1, 3001, dtype=np.uint64)
GONE = KEYS[::7]  # evicted before the second pass: tombstones in its delta
PENDING = np.arange(100_001, 100_301, dtype=np.uint64)  # pushed once: counted, no row yet
USERS = np.arange(1, 801, dtype=np.uint64)
HISTORY = np.stack([USERS * np.uint64(3), USERS * np.uint64(5)], axis=1)  # an id-rows table's rows
DENSE = 70_000  # elements: cut in slices over more than one shard (ps.routing.place_dense)


def _commit(c: PSClient, finisher: CommitFinisher, root: Path, n: int, mode: SaveMode) -> None:
    part = {f"metrics.{k}": v for k, v in Metrics().to_arrays().items()}
    checkpoints.write_worker_part(root, n, 0, part, {"rank": 0, "offsets": {"0": 10 * n}, "records": 1})
    saves = c.admin.save(into=checkpoints.shard_template(root, n), mode=mode, detach=True)
    finisher.start(lambda client: finish_pass(client, root, n, saves, [0], keep=5, fields={}))
    finisher.wait()


def _write_passes(tmp: Path, root: Path, n_shards: int) -> None:
    """Pass 1 a base, pass 2 a delta with tombstones, written by ``n_shards`` shards."""
    rng = np.random.default_rng(n_shards)
    with shard_processes(tmp, [TABLE], n_shards) as shards, PSClient(shards.endpoints) as c:
        finisher = CommitFinisher(PSClient(shards.endpoints))
        for _ in range(3):  # the second push admits every key; the third updates it
            c.wait(c.push("emb", KEYS, rng.standard_normal((KEYS.shape[0], 4)).astype(np.float32)))
        c.wait(c.push("emb", PENDING, np.ones((PENDING.shape[0], 4), np.float32)))
        c.wait(c.write_id_rows("ids.history", USERS, [HISTORY], mode="put", words=2))
        c.init_dense("w", np.zeros(DENSE, np.float32))
        c.wait(c.push_dense("w", np.linspace(-1, 1, DENSE).astype(np.float32)))
        _commit(c, finisher, root, 1, SaveMode.BASE)
        c.admin.end_pass()
        kept = np.setdiff1d(KEYS, GONE)
        c.wait(c.push("emb", kept, rng.standard_normal((kept.shape[0], 4)).astype(np.float32)))
        assert sum(e["evicted"]["emb"] for e in c.admin.shrink()) > 0
        _commit(c, finisher, root, 2, SaveMode.DELTA)
        finisher.close()


def _rows(tables: list[ShardTables]) -> dict[str, np.ndarray]:
    """Every column of every shard's rows, sorted by key (mod_epoch left out: a re-placement restamps it)."""
    cols: dict[str, list[np.ndarray]] = {}
    for t in tables:
        st = t.sparse["emb"].state
        for k, c in st.rows.cols.items():
            cols.setdefault(k, []).append(c[: st.rows.n])
    joined = {k: np.concatenate(v) for k, v in cols.items() if k != "mod_epoch"}
    order = np.argsort(joined["keys"], kind="stable")
    return {k: v[order] for k, v in joined.items()}


def _dense_value(tables: list[ShardTables]) -> np.ndarray:
    """Dense array "w" put together from the shards' parts (whole, or slices in order)."""
    parts = {name: t.dense[name].pull() for t in tables for name in t.dense}
    if "w" in parts:
        return parts["w"]
    order = sorted(parts, key=lambda p: int(p.split("slice")[1].split("of")[0]))
    return np.concatenate([parts[name] for name in order])


@pytest.mark.process
@pytest.mark.parametrize(("written", "restored"), [(2, 1), (2, 3), (4, 3), (1, 4)])
def test_a_pass_restored_by_another_shard_count_places_every_row_once(tmp_path: Path, written: int,
                                                                       restored: int) -> None:
    root = tmp_path / "ckpt"
    (tmp_path / "old").mkdir()
    _write_passes(tmp_path / "old", root, written)
    before = [ShardTables([TableConfig.model_validate(TABLE)], index=s) for s in range(written)]
    for s, tables in enumerate(before):
        replay(tables, restore_plan([Path(t.format(shard=s)) for t in checkpoints.chain(root, 2)]))
    expected = _rows(before)
    assert not np.isin(expected["keys"], GONE).any()  # the delta's tombstones removed them
    dense = _dense_value(before)

    (tmp_path / "new").mkdir()
    with shard_processes(tmp_path / "new", [TABLE], restored) as shards, PSClient(shards.endpoints) as c:
        got = restore(root, c, rank=0, chief=True)
        assert got.pass_id == 2
        assert c.placement.n_shards == restored and c.placement.version == 2
        after = str(tmp_path / "after" / "shard-{shard}")
        c.admin.save(into=after, mode=SaveMode.BASE, cursor="test")
        now = [ShardTables([TableConfig.model_validate(TABLE)], index=s) for s in range(restored)]
        for s, tables in enumerate(now):
            replay(tables, restore_plan([Path(after.format(shard=s))]))
            keys = tables.sparse["emb"].state.rows.cols["keys"][: tables.sparse["emb"].state.rows.n]
            assert (shard_of(keys, c.placement) == s).all()  # each row on the shard the placement names
        rows = _rows(now)
        assert np.unique(rows["keys"]).shape[0] == rows["keys"].shape[0]  # no row twice
        for k, v in expected.items():  # every row back, bit-identical: values, optimizer state, counts
            np.testing.assert_array_equal(rows[k], v, err_msg=k)
        admitted = sum(int(t.sparse["emb"].state.admission.admitted) for t in now)  # by each old shard's share
        assert abs(admitted - sum(int(t.sparse["emb"].state.admission.admitted) for t in before)) <= restored

        ids = c.wait(c.read_id_rows("ids.history", USERS, words=2))
        assert ids.found.all()
        np.testing.assert_array_equal(ids.rows, HISTORY)
        c.init_dense("w", np.zeros(DENSE, np.float32))  # exists: learns the layout of the new count
        np.testing.assert_array_equal(c.wait(c.pull_dense("w")), dense)

        found = c.wait(c.pull_existing("emb", expected["keys"]))
        assert found.found.all()
        np.testing.assert_array_equal(found.rows, expected["params"])
        assert not c.wait(c.pull_existing("emb", PENDING)).found.any()
        c.wait(c.push("emb", PENDING, np.ones((PENDING.shape[0], 4), np.float32)))  # its second count: admitted
        assert c.wait(c.pull_existing("emb", PENDING)).found.all()


@pytest.mark.process
def test_a_placement_this_build_cannot_route_is_refused_by_name(tmp_path: Path) -> None:
    root = tmp_path / "ckpt"
    (tmp_path / "old").mkdir()
    _write_passes(tmp_path / "old", root, 2)
    for n in (1, 2):
        path = checkpoints.pass_dir(root, n) / checkpoints.MANIFEST
        man = json.loads(path.read_text())
        assert man["placement"]["n_shards"] == 2 and len(man["placement"]["table"]) == 4096
        man["placement"] = {**man["placement"], "virtual_shards": 1024}
        path.write_text(json.dumps(man))
    (tmp_path / "new").mkdir()
    with shard_processes(tmp_path / "new", [TABLE], 3) as shards, PSClient(shards.endpoints) as c:
        with pytest.raises(Conflict, match="placement of 1024 virtual shards"):
            restore(root, c, rank=0, chief=True)
        assert checkpoints.complete_passes(root) == [1, 2]  # refused, not quarantined
        assert not c.wait(c.pull_existing("emb", KEYS)).found.any()  # nothing loaded
