"""Infer-mode scoring (Worker.score, the test pass of train-files): a batch whose rows were pulled
ahead (a prefetched Prepared) scores exactly as the same batch pulled at scoring time, and
scoring pushes nothing."""

from __future__ import annotations

import numpy as np

from models import build_model
from tests.trainer.test_learning import criteo_model, planted_batches
from trainer.params import LocalStore
from trainer.worker import Worker, prepare


def test_a_batch_pulled_ahead_scores_as_one_pulled_at_scoring_time() -> None:
    model = build_model(criteo_model("wide_deep"))
    store = LocalStore(model.tables, model.params.values)
    worker = Worker(model, store)
    train, test = list(planted_batches(2000, 500, seed=3)), next(planted_batches(500, 500, seed=4))
    for batch in train:
        worker.step(batch)
    rows_before = {name: len(table) for name, table in store.sparse.items()}
    ahead = prepare(model, test, pull=store.pull_sparse)
    np.testing.assert_array_equal(worker.score(ahead), worker.score(test))
    assert worker.score(test).shape == (500,)
    assert {name: len(table) for name, table in store.sparse.items()} == rows_before
