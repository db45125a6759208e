"""model.dense_average: the dense weights' moving average (bias-corrected) is what evaluation and export
see when on, the raw weights when off; training itself goes on with the raw weights; the average
is kept in a pass's worker part and a part without one starts it empty."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from core.errors import CorruptData
from models import build_model
from models.model_config import DenseAverageConfig, DenseMerge, ModelConfig
from tables.table_config import OptimizerConfig
from trainer.dense_sync import LocalDense, PSDense
from trainer.params import LocalStore
from trainer.worker import Worker

from .shared_dense import SharedDense

SGD = OptimizerConfig(kind="sgd", lr=1.0)  # a step moves the weights by exactly -grad
GRADS = [np.float32([1, -2, 0.5]), np.float32([0, 4, -1]), np.float32([3, 0, 2]), np.float32([-1, 1, 1])]


def reference_average(iterates: list[np.ndarray], decay: float) -> np.ndarray:
    """The slow definition: the weighted mean of the iterates, weights decay^(t - i)."""
    t = len(iterates)
    weights = np.array([decay ** (t - 1 - i) for i in range(t)])
    return (weights[:, None] * np.array(iterates, np.float64)).sum(0) / weights.sum()


@pytest.mark.parametrize("decay", [0.5, 0.9, 0.99])
def test_local_average_is_the_decayed_mean_of_the_iterates(decay: float) -> None:
    store = SharedDense(np.float32([0.5, 0, -1]))
    d = LocalDense(np.zeros(3, np.float32), SGD, sync_steps=2, merge=DenseMerge.MEAN,
                   average=DenseAverageConfig(decay=decay))
    d.start(store)
    np.testing.assert_array_equal(d.served(), store.dense)  # nothing averaged yet: the raw weights
    iterates = []
    for g in GRADS:
        if d.update(g, store):
            d.refresh(store)
        iterates.append(d.values.copy())  # after the optimizer's step (a refresh leaves it unchanged: 1 worker)
    np.testing.assert_allclose(d.served(), reference_average(iterates, decay), rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(d.values, iterates[-1])  # training goes on with the raw weights


def test_ps_rule_averages_the_weights_each_step_trained_with() -> None:
    store = SharedDense(np.float32([1, 2, 3]))
    d = PSDense(np.zeros(3, np.float32), sync_steps=2, average=DenseAverageConfig(decay=0.8))
    d.start(store)
    iterates = []
    for g in GRADS:
        iterates.append(d.values.copy())  # pulled every 2 steps
        if d.update(g, store):
            d.refresh(store)
    np.testing.assert_allclose(d.served(), reference_average(iterates, 0.8), rtol=1e-6)


def test_off_serves_the_raw_weights() -> None:
    store = SharedDense(np.zeros(3, np.float32))
    d = LocalDense(np.zeros(3, np.float32), SGD)
    d.start(store)
    for g in GRADS:
        d.update(g, store)
    raw = d.values.copy()
    np.testing.assert_array_equal(d.served(), raw)
    d.serve_average()
    np.testing.assert_array_equal(d.values, raw)
    assert set(d.state()) == {"t"}  # nothing more in a pass's worker part


def _worker(average: float | None) -> Worker:
    slots = [{"name": "u", "tower": "user"}, {"name": "i", "tower": "item"}]
    cfg = ModelConfig(type="wide_deep", slots=slots, n_dense=2, mlp=(4,), embedding_dim=2,
                      dense_average=None if average is None else {"decay": average})
    model = build_model(cfg)
    return Worker(model, LocalStore(cfg.table_configs(), model.params.values))


@pytest.mark.parametrize("average", [None, 0.9])
def test_evaluation_and_export_use_the_served_weights(average: float | None) -> None:
    worker = _worker(average)
    dense = worker.dense
    assert (dense.average is None) == (average is None)
    rng = np.random.default_rng(0)
    model = worker.model
    iterates = []
    for _ in range(5):
        model.params.grads[...] = rng.normal(size=model.params.grads.shape).astype(np.float32)
        dense.update(model.params.grads, worker.store)
        iterates.append(model.params.values.copy())
    expected = iterates[-1] if average is None else reference_average(iterates, average).astype(np.float32)
    exported = dense.served_params(model.params)  # what a commit's bundle carries
    raw = model.params.values.copy()
    model.params.values[...] = expected
    named = model.params.as_dict()  # the expected vector, named as the model names its arrays
    model.params.values[...] = raw
    assert exported.keys() == named.keys()
    for name, arr in exported.items():
        np.testing.assert_allclose(arr, named[name], rtol=1e-5, atol=1e-6)
        assert not np.shares_memory(arr, model.params.values)
    dense.serve_average()  # the file job before scoring its test set
    np.testing.assert_allclose(model.params.values, expected, rtol=1e-5, atol=1e-6)


def test_average_survives_a_pass_and_a_part_without_one_starts_it_empty() -> None:
    avg = DenseAverageConfig(decay=0.9)
    store = SharedDense(np.zeros(3, np.float32))
    a = LocalDense(np.zeros(3, np.float32), SGD, average=avg)
    a.start(store)
    for g in GRADS[:2]:
        a.update(g, store)
        a.refresh(store)
    saved = {k: v.copy() for k, v in a.state().items()}  # what commit writes as opt.*
    assert {"avg", "avg_t"} <= set(saved)
    b = LocalDense(np.zeros(3, np.float32), SGD, average=avg)
    b.load_state(saved)
    b.start(store)
    for d in (a, b):
        for g in GRADS[2:]:
            d.update(g, store)
    np.testing.assert_array_equal(a.served(), b.served())
    c = LocalDense(np.zeros(3, np.float32), SGD, average=avg)
    c.load_state({"t": saved["t"]})  # a pass saved with the average off
    c.start(store)
    np.testing.assert_array_equal(c.served(), store.dense)  # empty: the raw weights until its first step
    with pytest.raises(CorruptData):
        c.load_state({**saved, "avg": np.zeros(5, np.float32)})


def test_config_validation() -> None:
    assert DenseAverageConfig(decay=0.99).decay == 0.99
    for bad in (0.0, 1.0, -0.5, 1.5):
        with pytest.raises(ValidationError):
            DenseAverageConfig(decay=bad)
    with pytest.raises(ValidationError):
        DenseAverageConfig(decay=0.99, every=2)  # unknown keys are errors
    with pytest.raises(ValidationError):
        DenseAverageConfig()  # the decay has no default: it is the setting
    slots = [{"name": "u", "tower": "user"}, {"name": "i", "tower": "item"}]
    for kind in ("lr", "two_tower"):
        assert ModelConfig(type=kind, slots=slots).dense_average is None
    for kind in ("wide_deep", "deepfm"):  # WIDE_DEEP_DEFAULTS: on, unless the config turns it off
        assert ModelConfig(type=kind, slots=slots).dense_average == DenseAverageConfig(decay=0.995)
        assert ModelConfig(type=kind, slots=slots, dense_average=None).dense_average is None
    cfg = ModelConfig(type="wide_deep", slots=slots, dense_average={"decay": 0.995})
    assert cfg.dense_average == DenseAverageConfig(decay=0.995)
    assert ModelConfig.model_validate(cfg.model_dump(mode="json")) == cfg  # a bundle's config reloads
