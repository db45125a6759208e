"""dense_parts: a wide_deep batch whose MLP steps once per slice of its records. Without a dense
step in between, it computes the whole batch's loss, probabilities and sparse gradients; with
them, the MLP takes the same steps as on the slices one batch at a time."""

from __future__ import annotations

import numpy as np
import pytest

from core.errors import ConfigError
from logrecords.batch import concat_batches
from models import build_model
from models.layers import bce_with_logits
from trainer.job_config import DenseUpdate
from trainer.params import LocalStore
from trainer.worker import Worker, check_dense_parts

from .test_learning import criteo_model, planted_batches

FROZEN = {"kind": "sgd", "lr": 1e-30}  # rows that do not move: the dense steps alone differ


def test_parts_without_a_dense_step_give_the_whole_batchs_gradients() -> None:
    (batch,) = planted_batches(300, 300)
    model = build_model(criteo_model("wide_deep"))
    f = model.features(batch)
    store = LocalStore(model.tables, model.params.values)
    rows = {t: store.pull_sparse(t, ti.keys) for t, ti in f.tables.items()}
    loss, probs, grads = model.train_in_parts(f, rows, 4, lambda g: None)
    whole_loss, whole_probs, dlogits = bce_with_logits(model.forward(f, rows), f.labels)
    whole = model.backward(dlogits)
    assert loss == pytest.approx(whole_loss, rel=1e-5)
    np.testing.assert_allclose(probs, whole_probs, rtol=1e-5)
    for t in whole:
        np.testing.assert_allclose(grads[t], whole[t], rtol=1e-4, atol=1e-8)


def test_a_batch_in_parts_steps_the_mlp_as_its_slices_would_one_batch_each() -> None:
    slices = list(planted_batches(400, 100))
    cfg = criteo_model("wide_deep", sparse_optimizer=FROZEN, wide_optimizer=FROZEN,
                       dense_optimizer={"kind": "adam", "lr": 0.01})
    runs = []
    for parts, batches in ((4, [concat_batches(slices)]), (1, slices)):
        model = build_model(cfg)
        store = LocalStore(model.tables, model.params.values)
        worker = Worker(model, store, dense_update=DenseUpdate.LOCAL, dense_sync_steps=1, dense_parts=parts)
        for b in batches:
            worker.step(b)
        runs.append(model.params.values.copy())
    assert np.abs(runs[0] - build_model(cfg).params.values).max() > 1e-3
    np.testing.assert_allclose(runs[0], runs[1], rtol=1e-4, atol=1e-6)


def test_a_model_without_parts_and_sync_mode_are_refused() -> None:
    model = build_model(criteo_model("lr"))
    with pytest.raises(ConfigError, match="dense_parts"):
        Worker(model, LocalStore(model.tables, model.params.values), dense_parts=2)
    with pytest.raises(ConfigError, match="async"):  # its dense change is applied only at the step's barrier
        check_dense_parts(2, "sync")
    check_dense_parts(2, "async")
