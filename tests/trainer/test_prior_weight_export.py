"""The chief's export writes the popularity prior's weight it chose on its users' picks after the previous
bundle into the bundle's manifest (trainer.export, trainer.prior_weight), over a bundle's whole item set, a
delta's too; the service under weight ``auto`` serves it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from exports.bundle import read_manifest
from exports.item_catalog import ItemCatalog
from models import build_model
from models.model_config import ModelConfig
from models.two_tower import as_two_tower
from service.popularity_prior import item_counts, served_weight
from trainer import prior_weight
from trainer.export import Exporter
from trainer.history_join import HistoryJoin
from trainer.prior_weight import WEIGHTS, RecentPositives

from ..ps.ps_harness import shard_processes
from ..service.service_support import HISTORY_SCHEMA, picks

pytestmark = pytest.mark.process

USER, ITEM = np.uint64(0 << 56), np.uint64(1 << 56)
MODEL = ModelConfig.model_validate({
    "type": "two_tower", "slots": [{"name": "user", "tower": "user"},
                                   {"name": "history", "tower": "user", "pooling": "mean"},
                                   {"name": "item", "tower": "item"}],
    "embedding_dim": 8, "mlp": [16], "tower_dim": 8, "seed": 5, "n_dense": 0})


def test_the_bundle_carries_the_weight_chosen_on_the_picks_after_the_previous_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prior_weight, "REPLAY_EVERY_S", 1e9)  # after the first choice, no replay till told
    tables = [t.model_dump(mode="json") for t in MODEL.table_configs()]
    users = np.arange(1, 301, dtype=np.uint64) | USER
    items = np.arange(1, 61, dtype=np.uint64) | ITEM
    rng = np.random.default_rng(0)
    slots = tuple(s.name for s in as_two_tower(build_model(MODEL)).item_slots)
    dense = build_model(MODEL).params.as_dict()
    counts = (np.sort(items), rng.exponential(3.0, items.shape[0]), 400.0)
    with shard_processes(tmp_path, tables) as shards, shards.client() as c:
        catalog = ItemCatalog(slots, client=c)
        catalog.observe(picks(np.repeat(users[:1], items.shape[0]), items, 0.0))
        join = HistoryJoin(HISTORY_SCHEMA, shards.client())
        recent = RecentPositives(HISTORY_SCHEMA.history.slot if HISTORY_SCHEMA.history else None)

        def pick(t0: float) -> None:  # one pick of each user
            recent.observe(join.join(picks(users, rng.choice(items, users.shape[0]), t0)))

        exporter = Exporter(str(tmp_path / "exports"), shards.client(), MODEL, base_every=10, schema=HISTORY_SCHEMA)
        pick(100.0)
        pick(200.0)  # the second pick has a history: remembered
        first = exporter.export(1, dense, 400.0, ItemCatalog(slots), popularity=counts, recent=recent.snapshot())
        # no pick came after an earlier bundle yet: nothing chosen, the service serves its fallback weight
        assert first["kind"] == "base" and first["popularity_weight"] is None
        assert read_manifest(tmp_path / "exports", 1).popularity_weight is None

        pick(300.0)  # a next pick of each user the first bundle kept the queries of
        catalog.observe(picks(users[:1], items[:1], 500.0))  # one item written since: a delta holds it alone
        second = exporter.export(2, dense, 500.0, ItemCatalog(slots), popularity=counts, recent=recent.snapshot())
        assert second["kind"] == "delta" and second["items"] == 1 and second["popularity_weight"] in WEIGHTS
        assert exporter.items is not None and exporter.items[0].tolist() == np.sort(items).tolist()
        man = read_manifest(tmp_path / "exports", 2)
        assert man.popularity_weight is not None and man.popularity_weight["weight"] == second["popularity_weight"]
        assert man.popularity_weight["picks"] == users.shape[0]
        assert set(man.popularity_weight["hit_rates"]) == {f"{w:g}" for w in WEIGHTS}
        assert served_weight("auto", item_counts(tmp_path / "exports", man)) == second["popularity_weight"]
        assert served_weight(1.5, item_counts(tmp_path / "exports", man)) == 1.5

        # a weight is chosen: the exports till the next replay carry it
        pick(600.0)
        third = exporter.export(3, dense, 600.0, ItemCatalog(slots), popularity=counts, recent=recent.snapshot())
        assert third["popularity_weight"] == second["popularity_weight"]
        assert read_manifest(tmp_path / "exports", 3).popularity_weight == man.popularity_weight
        monkeypatch.setattr(prior_weight, "REPLAY_EVERY_S", 0.0)  # the next replay: the earlier picks weigh less
        fourth = exporter.export(4, dense, 600.0, ItemCatalog(slots), popularity=counts, recent=recent.snapshot())
        assert fourth["popularity_weight"] in WEIGHTS
        assert read_manifest(tmp_path / "exports", 4).popularity_weight["picks"] == round(0.8 * 300 + 300)
        join.close()
        exporter.close()
