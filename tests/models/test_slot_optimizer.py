"""A slot with an optimizer of its own: its rows live in a table of their own with that update rule."""

from __future__ import annotations

import numpy as np

from models import build_model
from models.model_config import ModelConfig
from tests.models.helpers import random_batch
from trainer.params import LocalStore
from trainer.worker import Worker

SLOTS = [{"name": "a", "tower": "user", "optimizer": {"kind": "adam", "lr": 0.01}},
         {"name": "b", "pooling": "mean", "tower": "user"}, {"name": "c", "tower": "item"},
         {"name": "d", "dim": 3, "tower": "item"}]


def _config() -> ModelConfig:
    return ModelConfig.model_validate({"type": "two_tower", "slots": SLOTS, "n_dense": 3, "embedding_dim": 4,
                                       "mlp": (), "tower_dim": 4, "seed": 3})


def test_the_slot_gets_its_own_table_with_its_optimizer_and_the_others_share_theirs() -> None:
    config = _config()
    tables = {t.name: t for t in config.table_configs()}
    assert sorted(tables) == ["emb3", "emb4", "emb4.a"]
    assert tables["emb4.a"].optimizer.kind == "adam" and tables["emb4.a"].dim == 4
    assert tables["emb4"].optimizer == config.sparse_optimizer
    assert [config.table_name(s) for s in config.slots] == ["emb4.a", "emb4", "emb4", "emb3"]


def test_a_step_updates_the_own_tables_rows_by_its_rule() -> None:
    model = build_model(_config())
    store = LocalStore(model.tables, model.params.values)
    batch = random_batch(16, seed=1)
    Worker(model, store).step(batch)
    keys = np.unique(batch.slots["a"][0])
    rows = store.pull_sparse("emb4.a", keys)
    assert rows.shape == (keys.shape[0], 5)  # the wide weight, then the 4-dim embedding
    # Adam's first step moves every coordinate with a gradient by about lr, whatever the gradient's size
    init = build_model(_config())  # the same seed: the same starting rows
    start = LocalStore(init.tables, init.params.values).pull_sparse("emb4.a", keys)
    moved = np.abs(rows[:, 1:] - start[:, 1:])
    assert np.all((moved < 0.0105) & (np.isclose(moved, 0.01, rtol=0.05) | (moved < 1e-6)))
    assert np.any(moved > 0.009)
