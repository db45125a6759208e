"""The live path (service.live_items): items that training changes between bundles reach the
index (changed ones re-embedded from live rows with the bundle's item tower, new ones added)
without a new bundle; a shard whose tables go back to a save stops the live path, read-through
included, until a newer bundle is served. Plus the index's live batches per kind (HNSW: only
new items); a tower with more item slots reads them from the catalogue. Real shard processes, real app."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from core.errors import Unavailable
from exports.item_catalog import CATALOG_TABLE, ItemCatalog
from exports.predictor import Predictor
from launcher.up_watch import live_line
from logrecords.batch import Batch
from logrecords.schema_config import HashKind, SchemaConfig, SlotConfig, SlotKind
from service import live_items
from service.settings import IndexSettings, ReadThroughSettings
from service.vector_index import ItemIndex
from tables.table_config import TableConfig
from tests.ps.ps_harness import shard_processes

from .service_support import BundleBuilder, make_settings, random_items, started, wait_until

SCHEMA = SchemaConfig(
    format="json", label="label", user_id="user", item_id="item",
    slots=(SlotConfig(name="user", kind=SlotKind.SPARSE, hash=HashKind.INT, slot_id=1),
           SlotConfig(name="item", kind=SlotKind.SPARSE, hash=HashKind.INT, slot_id=2)))
MODEL = {"type": "two_tower", "slots": [{"name": "user", "dim": 8, "tower": "user"},
                                        {"name": "item", "dim": 8, "tower": "item"}],
         "mlp": [16], "tower_dim": 8, "seed": 3}
ITEMS = np.arange(1, 41, dtype=np.uint64) | np.uint64(2 << 56)
USERS = np.arange(1, 11, dtype=np.uint64) | np.uint64(1 << 56)


def _vectors(b: BundleBuilder, ids: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The item tower's vectors of ``ids`` whose (only) rows are ``rows``."""
    by_id = {int(i): r for i, r in zip(ids, rows, strict=True)}
    p = Predictor(b.model.model_dump(mode="json"), b.dense,
                  lambda t, keys: np.stack([by_id[int(k)] for k in keys]))
    n = ids.shape[0]
    batch = Batch(labels=np.zeros(n, np.float32), dense=np.zeros((n, 0), np.float32),
                  slots={"item": (ids, np.arange(n + 1, dtype=np.int64))}, item_id=ids)
    return p.item_vectors(batch)


@contextmanager
def _live_service(tmp_path: Path, b: BundleBuilder, config: TableConfig) -> Iterator[tuple[Any, Any, Any]]:
    """Two shard processes of ``config``'s table, and the app serving ``b``'s bundles with its live
    path following them: (shards, a PS client, the test client)."""
    (tmp_path / "ps").mkdir()
    with shard_processes(tmp_path / "ps", [config.model_dump(mode="json")], n=2) as shards, shards.client() as ps:
        rt = ReadThroughSettings(endpoints=shards.endpoints, timeout_s=2.0, items_interval_s=0.02)
        with started(make_settings(b.root, read_through=rt)) as client:
            live = client.app.state.live
            wait_until(lambda: live.status()["cursors"] is not None, what="the live path following the shards")
            yield shards, ps, client


@pytest.mark.process
def test_changed_and_new_items_reach_the_index_and_a_shard_reload_stops_the_live_path(tmp_path: Path) -> None:
    b = BundleBuilder(tmp_path / "exports", MODEL, schema=SCHEMA.model_dump(mode="json"))
    b.push("user", USERS)
    b.push("item", ITEMS[:30])
    rng = np.random.default_rng(1)
    b.export("base", items=(ITEMS[:30], rng.standard_normal((30, 8)).astype(np.float32)))
    table = b.table_of("item")
    config = next(c for c in b.model.table_configs() if c.name == table)
    with _live_service(tmp_path, b, config) as (shards, ps, client):
        live, store = client.app.state.live, client.app.state.store
        changed, new = ITEMS[:3], ITEMS[35:]
        ids = np.concatenate([changed, new, USERS[:2]])  # user keys share the table: not items
        ps.wait(ps.push(table, ids, np.full((ids.shape[0], config.width), 0.25, np.float32)))
        wait_until(lambda: live.items_refreshed >= 8, what="the live refresh")
        rows, found = ps.wait(ps.pull_existing(table, np.concatenate([changed, new])))
        assert found.all()
        want = _vectors(b, np.concatenate([changed, new]), rows)
        with store.read() as side:
            assert side.version == 1, "no new bundle: the live path alone"
            got = side.items.vectors[[side.items.position_of(int(i)) for i in np.concatenate([changed, new])]]
            assert side.items.size == 35 and USERS[0] not in side.items.sorted_ids
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        r = client.get(f"/v1/items/{int(new[0])}/similar?k=3")
        assert r.status_code == 200 and len(r.json()["items"]) == 3, "a new item is searchable at once"
        status = client.get("/admin/status", headers={"Authorization": "Bearer test-admin-token-5f2b"}).json()
        assert status["served"]["version"] == 1 and status["served"]["live"]["state"] == "live"
        assert status["live"]["items_added"] == 5 and status["live"]["reached"] is not None
        metrics = client.get("/metrics").text
        assert "streamrec_live_item_freshness_p95_seconds" in metrics
        row_p95 = next(line for line in metrics.splitlines() if line.startswith("streamrec_live_row_freshness_p95"))
        assert 0.0 <= float(row_p95.split()[-1]) < 60.0, "the changed rows' receipt -> memory lag is measured"
        assert "rows p50" in live_line(status), "the console shows the rows' freshness"

        # shard 0 restarts empty: its log starts a new generation -> the live path stops
        shards.kill(0)
        shards.start(0)
        shards.wait_healthy()
        wait_until(lambda: live.paused_at == 1, what="the live path stopping")
        assert client.app.state.read_through.paused
        body = client.post("/v1/embeddings:lookup", json={"slot": "item", "ids": [int(new[0])]}).json()
        assert body["missing"] == [int(new[0])], "stopped: lookups serve the bundle, which lacks the new item"
        b.export("base", items=(ITEMS[:30], rng.standard_normal((30, 8)).astype(np.float32)))
        wait_until(lambda: live.paused_at is None, what="the live path resuming on a newer bundle")
        assert not client.app.state.read_through.paused and store.version == 2


@pytest.mark.process
def test_the_live_path_reports_cursors_only_once_every_shard_answered_so_a_push_after_is_recorded(
        tmp_path: Path) -> None:
    """A shard's change log records nothing until its first read: a live path that reported cursors
    before its first read answered let a push land unrecorded (a loaded CI machine lost it)."""
    b = BundleBuilder(tmp_path / "exports", MODEL, schema=SCHEMA.model_dump(mode="json"))
    b.push("item", ITEMS[:30])
    b.export("base", items=(ITEMS[:30], np.random.default_rng(3).standard_normal((30, 8)).astype(np.float32)))
    table = b.table_of("item")
    config = next(c for c in b.model.table_configs() if c.name == table)
    (tmp_path / "ps").mkdir()
    with shard_processes(tmp_path / "ps", [config.model_dump(mode="json")], n=2) as shards, shards.client() as ps:
        frozen = shards.procs[1]
        assert frozen is not None
        os.killpg(frozen.pid, signal.SIGSTOP)  # shard 1 answers nothing until it is continued
        try:
            rt = ReadThroughSettings(endpoints=shards.endpoints, timeout_s=0.2, items_interval_s=0.02)
            with started(make_settings(b.root, read_through=rt)) as client:
                live = client.app.state.live
                wait_until(lambda: live.errors >= 2, what="the live path's reads timing out")
                assert live.status()["cursors"] is None, "no read has answered from every shard"
                os.killpg(frozen.pid, signal.SIGCONT)
                wait_until(lambda: live.status()["cursors"] is not None, what="the live path following the shards")
                new = ITEMS[35:]
                ps.wait(ps.push(table, new, np.full((new.shape[0], config.width), 0.5, np.float32)))
                wait_until(lambda: live.items_added >= new.shape[0], what="the new items reaching the index")
        finally:
            os.killpg(frozen.pid, signal.SIGCONT)


@pytest.mark.process
def test_items_whose_refresh_failed_are_refreshed_at_the_next_poll(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A busy shard times a refresh's row pull out after the changes' cursors moved past its items: they
    are tried again, not lost until the next bundle (a loaded CI machine lost them)."""
    b = BundleBuilder(tmp_path / "exports", MODEL, schema=SCHEMA.model_dump(mode="json"))
    b.push("item", ITEMS[:30])
    b.export("base", items=(ITEMS[:30], np.random.default_rng(2).standard_normal((30, 8)).astype(np.float32)))
    table = b.table_of("item")
    config = next(c for c in b.model.table_configs() if c.name == table)
    real, failed = live_items._Tower.computed, []

    def fails_once(tower: Any, client: Any, ids: np.ndarray) -> Any:
        if not failed:
            failed.append(ids.copy())
            raise Unavailable("shard 0 did not answer within 2.0 s (the test's)")
        return real(tower, client, ids)

    monkeypatch.setattr(live_items._Tower, "computed", fails_once)
    with _live_service(tmp_path, b, config) as (_, ps, client):
        live, store = client.app.state.live, client.app.state.store
        changed, new = ITEMS[:3], ITEMS[35:]
        ids = np.concatenate([changed, new])
        ps.wait(ps.push(table, ids, np.full((ids.shape[0], config.width), 0.5, np.float32)))
        wait_until(lambda: live.items_refreshed >= 8, what="the refresh after the failed one")
        # the first poll may have read one shard's changes before the other's (the push goes to both at once)
        assert failed and set(failed[0].tolist()) <= set(ids.tolist()) and live.errors >= 1
        rows, _ = ps.wait(ps.pull_existing(table, ids))
        with store.read() as side:
            got = side.items.vectors[[side.items.position_of(int(i)) for i in ids]]
        np.testing.assert_allclose(got, _vectors(b, ids, rows), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind", ["flat", "ivf", "hnsw"])
def test_live_batches_replace_changed_items_except_on_hnsw_and_add_new_ones(kind: str) -> None:
    rng = np.random.default_rng(0)
    ids, vecs = random_items(rng, 400, 8, clusters=8)
    base = ItemIndex.build(IndexSettings(kind=kind, nlist=4, nprobe=4), ids, vecs)
    changed = ids[:5]
    new_ids = np.array([12345, 67890], np.uint64)
    new_ids = new_ids[~np.isin(new_ids, ids)]
    moved = rng.standard_normal((5 + new_ids.shape[0], 8)).astype(np.float32) * 10
    before = base.vectors.copy()
    fresh, added = base.live_upserted(np.concatenate([changed, new_ids]), moved)
    assert added == new_ids.shape[0] and fresh.size == base.size + added
    np.testing.assert_array_equal(base.vectors, before)
    for i, item in enumerate(new_ids):
        top, _ = fresh.search(moved[5 + i : 6 + i], 1)
        assert int(top[0][0]) == int(item), "a new item is found by its own vector"
    pos = fresh.position_of(int(changed[0]))
    if kind == "hnsw":  # HNSW cannot remove ids: a changed item keeps its bundle vector until the next bundle
        np.testing.assert_array_equal(fresh.vectors[pos], base.vectors[base.position_of(int(changed[0]))])
    else:
        np.testing.assert_array_equal(fresh.vectors[pos], moved[0])
        top, _ = fresh.search(moved[:1], 1)
        assert int(top[0][0]) == int(changed[0]), "the changed item is found by its new vector"
        assert fresh.index.ntotal == fresh.size, "removed before re-added: no duplicate entries"
    assert base.size == 400 and base.index.ntotal == 400, "the searched snapshot is never changed"


@pytest.mark.process
@pytest.mark.parametrize("late_s", [0.0, 2.0])
def test_an_item_tower_with_more_slots_reads_item_features_from_the_catalogue(tmp_path: Path, late_s: float) -> None:
    """``late_s``: the catalogue rows land this long after the push (a loaded trainer); the live
    path polls every 20 ms, and an item waits for its row by time (live_items.CATALOGUE_WAIT_S),
    not by a count of polls, which a short interval would use up first."""
    schema = SchemaConfig(
        format="json", label="label", user_id="user", item_id="item",
        slots=(*SCHEMA.slots, SlotConfig(name="genre", kind=SlotKind.SPARSE, hash=HashKind.INT, slot_id=3)))
    model = {**MODEL, "slots": [*MODEL["slots"], {"name": "genre", "dim": 8, "tower": "item"}]}
    b = BundleBuilder(tmp_path / "exports", model, schema=schema.model_dump(mode="json"))
    b.push("item", ITEMS[:30])
    b.export("base", items=(ITEMS[:30], np.random.default_rng(2).standard_normal((30, 8)).astype(np.float32)))
    table = b.table_of("item")
    config = next(c for c in b.model.table_configs() if c.name == table)
    new = ITEMS[35:38]
    genres = np.array([1, 2, 1], np.uint64) | np.uint64(3 << 56)
    catalog = ItemCatalog(("item", "genre"))
    batch = Batch(labels=np.zeros(3, np.float32), dense=np.zeros((3, 0), np.float32), item_id=new,
                  slots={"item": (new, np.arange(4, dtype=np.int64)), "genre": (genres, np.arange(4, dtype=np.int64))})
    with _live_service(tmp_path, b, config) as (_, ps, client):
        live, store = client.app.state.live, client.app.state.store
        keys = np.concatenate([new, genres])
        ps.wait(ps.push(table, keys, np.full((keys.shape[0], config.width), 0.5, np.float32)))
        ids, rows = catalog.encode(batch)  # written after the push, as the trainer does
        time.sleep(late_s)
        ps.wait(ps.write_id_rows(CATALOG_TABLE, ids, [rows], mode="put", words=catalog.words))
        wait_until(lambda: live.items_added == 3, what="the new items, once catalogued")
        tower_rows = {int(k): r for k, r in zip(keys, ps.wait(ps.pull(table, keys)), strict=True)}
        p = Predictor(b.model.model_dump(mode="json"), b.dense,
                      lambda t, k: np.stack([tower_rows[int(x)] for x in k]))
        want = p.item_vectors(batch)
        with store.read() as side:
            got = side.items.vectors[[side.items.position_of(int(i)) for i in new]]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind", ["flat", "ivf"])
def test_live_batches_take_turns_on_the_two_sides_while_readers_search(tmp_path: Path, kind: str) -> None:
    """ModelStore.upsert_items_live: each side's index is changed in place only while no reader
    holds it, readers always get k known items, and afterwards both sides hold every batch, in
    two indexes of their own; refreshed known items do not count towards an IVF retrain."""
    import threading

    from service.model_store import ModelStore

    b = BundleBuilder(tmp_path / "exports")
    b.push("user", np.arange(1, 10, dtype=np.uint64))
    rng = np.random.default_rng(7)
    ids, vecs = random_items(rng, 2000, 8, clusters=8)
    b.export("base", items=(ids, vecs))
    store = ModelStore(b.root, IndexSettings(kind=kind, nlist=8, nprobe=8, rebuild_fraction=0.05))
    store.apply(1)
    new_ids = np.arange(1, 201, dtype=np.uint64) << np.uint64(20)
    new_ids = new_ids[~np.isin(new_ids, ids)]
    known = set(ids.tolist()) | set(new_ids.tolist())
    errors: list[BaseException] = []
    stop = threading.Event()

    def reader(seed: int) -> None:
        q = np.random.default_rng(seed).standard_normal((2, 8)).astype(np.float32)
        while not stop.is_set():
            try:
                with store.read() as side:
                    items = side.items
                    before = items.vectors.copy()
                    got, _ = items.search(q, 20)
                    assert all(g.shape[0] == 20 and set(g.tolist()) <= known for g in got)
                    np.testing.assert_array_equal(items.vectors, before)  # nobody writes a held index
            except BaseException as err:
                errors.append(err)
                return

    threads = [threading.Thread(target=reader, args=(s,)) for s in range(2)]
    for t in threads:
        t.start()
    moved: dict[int, np.ndarray] = {}
    try:
        for step in range(20):
            batch = np.concatenate([rng.choice(ids, 50, replace=False), new_ids[step * 10 : step * 10 + 10]])
            v = rng.standard_normal((batch.shape[0], 8)).astype(np.float32) * 5
            assert store.upsert_items_live(1, batch, v) == min(10, max(0, new_ids.shape[0] - step * 10))
            moved.update(zip(batch.tolist(), v, strict=True))
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not errors, errors[0]
    assert store.upsert_items_live(2, ids[:1], vecs[:1]) is None, "another bundle's batch changes nothing"
    sides = [store._active, store._standby]
    assert sides[0].items is not sides[1].items and sides[0].items.index is not sides[1].items.index
    some = list(moved)[::25]
    for side in sides:
        items = side.items
        assert items.size == ids.shape[0] + new_ids.shape[0] and items.index.ntotal == items.size
        assert items.changed == new_ids.shape[0], "only new items count towards a retrain"
        for item in some:  # the vectors and the Faiss index itself hold the newest vector
            pos = items.position_of(item)
            np.testing.assert_array_equal(items.vectors[pos], moved[item])
            np.testing.assert_array_equal(items.index.reconstruct(pos), moved[item])
