"""model.dense_average.per_job_batch: among K workers each taking P dense steps per batch, a worker's
average decays by decay^(K/P) per step, so that it spans the records of one worker's average; off,
or at one worker taking one step per batch, it decays by decay per step as before."""

from __future__ import annotations

import numpy as np
import pytest

from models import build_model
from models.model_config import DenseAverageConfig, DenseMerge, ModelConfig
from tables.table_config import OptimizerConfig
from trainer.dense_sync import LocalDense, PSDense
from trainer.params import LocalStore
from trainer.worker import Worker

from .shared_dense import SharedDense

SGD = OptimizerConfig(kind="sgd", lr=1.0)
ADAM = OptimizerConfig(kind="adam", lr=0.1)  # its average is taken in the optimizer's own pass
GRADS = [np.float32([1, -2, 0.5]), np.float32([0, 4, -1]), np.float32([3, 0, 2]), np.float32([-1, 1, 1]),
         np.float32([2, 2, -3])]


def reference_average(iterates: list[np.ndarray], keep: float) -> np.ndarray:
    """The slow definition: the weighted mean of the iterates, weights keep^(t - i), one element at a time."""
    out = np.zeros(len(iterates[0]), np.float64)
    for j in range(out.shape[0]):
        num = den = 0.0
        for i, w in enumerate(iterates):
            weight = keep ** (len(iterates) - 1 - i)
            num += weight * float(w[j])
            den += weight
        out[j] = num / den
    return out


def _local_iterates(d: LocalDense, store: SharedDense) -> list[np.ndarray]:
    """Each step's weights after its update (what the average takes), merging as the rule says."""
    d.start(store)
    iterates = []
    for g in GRADS:
        synced = d.update(g, store)
        iterates.append(d.values.copy())
        if synced:
            d.refresh(store)  # 4 workers' mean merge: the merged value differs from the worker's
    return iterates


@pytest.mark.parametrize("optimizer", [SGD, ADAM])
@pytest.mark.parametrize(("workers", "parts", "per_job_batch", "keep"), [
    (1, 1, True, 0.9), (4, 1, True, 0.9 ** 4), (4, 2, True, 0.9 ** 2), (1, 4, True, 0.9 ** 0.25),
    (4, 1, False, 0.9), (4, 2, False, 0.9),
])
def test_local_average_decays_per_batch_of_the_job(optimizer: OptimizerConfig, workers: int, parts: int,
                                                   per_job_batch: bool, keep: float) -> None:
    store = SharedDense(np.float32([0.5, 0, -1]), workers=workers)
    d = LocalDense(np.zeros(3, np.float32), optimizer, sync_steps=2, merge=DenseMerge.MEAN,
                   average=DenseAverageConfig(decay=0.9, per_job_batch=per_job_batch), steps_per_batch=parts)
    iterates = _local_iterates(d, store)
    np.testing.assert_allclose(d.served(), reference_average(iterates, keep), rtol=1e-5, atol=1e-6)


def test_ps_rule_average_decays_per_batch_of_the_job() -> None:
    store = SharedDense(np.float32([1, 2, 3]), workers=4)
    d = PSDense(np.zeros(3, np.float32), sync_steps=2, average=DenseAverageConfig(decay=0.8))
    d.start(store)
    iterates = []
    for g in GRADS:
        iterates.append(d.values.copy())
        if d.update(g, store):
            d.refresh(store)
    np.testing.assert_allclose(d.served(), reference_average(iterates, 0.8 ** 4), rtol=1e-5)


def test_a_worker_in_parts_gives_its_average_the_parts() -> None:
    slots = [{"name": "u", "tower": "user"}, {"name": "i", "tower": "item"}]
    cfg = ModelConfig(type="wide_deep", slots=slots, n_dense=2, mlp=(4,), embedding_dim=2,
                      dense_average={"decay": 0.9})
    model = build_model(cfg)
    worker = Worker(model, LocalStore(cfg.table_configs(), model.params.values), dense_parts=4)
    rng = np.random.default_rng(0)
    iterates = []
    for _ in range(6):
        model.params.grads[...] = rng.normal(size=model.params.grads.shape).astype(np.float32)
        worker.dense.update(model.params.grads, worker.store)
        iterates.append(model.params.values.copy())
    np.testing.assert_allclose(worker.dense.served(), reference_average(iterates, 0.9 ** 0.25), rtol=1e-5,
                               atol=1e-6)


def test_per_job_batch_is_on_by_default_and_reloads() -> None:
    assert DenseAverageConfig(decay=0.99).per_job_batch is True
    slots = [{"name": "u", "tower": "user"}, {"name": "i", "tower": "item"}]
    cfg = ModelConfig(type="wide_deep", slots=slots, dense_average={"decay": 0.995, "per_job_batch": False})
    assert cfg.dense_average == DenseAverageConfig(decay=0.995, per_job_batch=False)
    assert ModelConfig.model_validate(cfg.model_dump(mode="json")) == cfg  # a bundle's config reloads
