"""One item catalogue for the job: items any worker saw are in the PS, exported and indexed,
including those only a non-chief worker saw; a delta bundle carries the items written since."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from exports import bundle
from exports.item_catalog import ItemCatalog
from logrecords.batch import Batch
from models import build_model
from models.model_config import ModelConfig
from models.two_tower import as_two_tower
from trainer.export import Exporter

from ..ps.ps_harness import shard_processes
from ..service.service_support import SMALL_MODEL, make_settings, started, wait_until

ITEM = np.uint64(2 << 56)


def _batch(items: np.ndarray, tags: int = 1) -> Batch:
    n = items.shape[0]
    lists = [np.arange(1 + i % tags, dtype=np.uint64) + items[i] for i in range(n)]  # item slot lists of 1..tags ids
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum([len(x) for x in lists], out=offsets[1:])
    users = np.arange(1, n + 1, dtype=np.uint64) | np.uint64(1 << 56)
    return Batch(labels=np.ones(n, np.float32), dense=np.zeros((n, 2), np.float32),
                 slots={"item": (np.concatenate(lists), offsets), "user": (users, np.arange(n + 1, dtype=np.int64))},
                 item_id=items)


def test_catalogue_rows_round_trip_through_the_encoding() -> None:
    catalog = ItemCatalog(("item", "absent"), ids_per_slot=3)
    items = np.array([5, 9, 5, 0, 7], np.uint64) | ITEM
    items[3] = 0  # a record without an item is no item
    batch = _batch(items, tags=5)
    ids, rows = catalog.encode(batch)
    assert sorted(ids.tolist()) == sorted({int(i) for i in items if i})
    back = catalog.batch_of(ids, rows)
    for j, item in enumerate(ids.tolist()):
        last = max(r for r in range(len(items)) if int(items[r]) == item)  # an item is described by its last record
        assert back.slot_ids("item", j).tolist() == batch.slot_ids("item", last)[:3].tolist()
        assert back.slot_ids("absent", j).size == 0


@pytest.mark.process
def test_items_seen_only_by_a_non_chief_worker_are_exported_and_searchable(tmp_path: Path) -> None:
    model = ModelConfig.model_validate(SMALL_MODEL)
    slots = tuple(s.name for s in as_two_tower(build_model(model)).item_slots)
    tables = [t.model_dump(mode="json") for t in model.table_configs()]
    chief_items = np.arange(1, 21, dtype=np.uint64) | ITEM
    other_items = np.arange(1000, 1040, dtype=np.uint64) | ITEM
    with shard_processes(tmp_path, tables) as shards, shards.client() as chief, shards.client() as other:
        ItemCatalog(slots, client=chief).observe(_batch(chief_items))
        ItemCatalog(slots, client=other).observe(_batch(other_items))  # the chief's process never sees these
        exporter = Exporter(str(tmp_path / "exports"), shards.client(), model, base_every=10)
        dense = build_model(model).params.as_dict()
        try:
            first = exporter.export(1, dense, None, ItemCatalog(slots))
            root = tmp_path / "exports"
            ids, vectors = bundle.load_items(root, bundle.read_manifest(root, first["version"]))
            assert sorted(ids.tolist()) == sorted(np.r_[chief_items, other_items].tolist())
            assert np.isfinite(vectors).all() and vectors.shape == (60, model.tower_dim)
            late = np.array([5000], np.uint64) | ITEM
            ItemCatalog(slots, client=other).observe(_batch(late))
            second = exporter.export(2, dense, None, ItemCatalog(slots))
            man = bundle.read_manifest(root, second["version"])
            assert man.kind == "delta" and bundle.load_items(root, man)[0].tolist() == late.tolist()
        finally:
            exporter.close()
    with started(make_settings(root)) as client:  # ready at the first bundle: the delta comes after
        wait_until(lambda: client.get("/readyz").json().get("version") == second["version"], what="the delta")
        for item in (int(other_items[7]), int(late[0]), int(chief_items[0])):
            r = client.get(f"/v1/items/{item}/similar", params={"k": 5})
            assert r.status_code == 200, r.text
            assert len(r.json()["items"]) == 5


def test_the_catalogue_takes_the_item_tables_eviction_ttl() -> None:
    """Items leave the catalogue as their item-id rows leave the table: the job gives the
    catalogue the ttl of the table holding the item-id slot, and every write carries it."""
    from ps.ps_config import PSConfig
    from trainer.job import _item_ttl

    model = ModelConfig.model_validate(SMALL_MODEL)
    tables = {t.name: t for t in model.table_configs()}  # emb8 (users), emb16 (items)
    table = tables["emb16"]
    ps = PSConfig(tables=(tables["emb8"].model_copy(update={"eviction": table.eviction.model_copy(
        update={"ttl_passes": 1})}), table.model_copy(update={"eviction": table.eviction.model_copy(
            update={"ttl_passes": 3})})))
    assert _item_ttl(model, ps, "item") == 3
    assert _item_ttl(model, PSConfig(tables=(table,)), "item") is None  # no ttl: items stay
    assert _item_ttl(model, ps, "no-such-field") is None and _item_ttl(model, PSConfig(), "item") is None

    class Capture:
        def __init__(self) -> None:
            self.metas: list[dict] = []

        def write_id_rows(self, table, keys, columns, *, mode, words, ttl_passes=None):
            self.metas.append({"table": table, "mode": mode, "ttl_passes": ttl_passes, "n": keys.shape[0]})

        def wait(self, ticket):
            return ticket

    client = Capture()
    catalog = ItemCatalog(("item",), client=client, ttl_passes=3)
    catalog.observe(_batch(np.array([5, 9], np.uint64) | ITEM))
    assert client.metas == [{"table": "ids.items", "mode": "put", "ttl_passes": 3, "n": 2}]
