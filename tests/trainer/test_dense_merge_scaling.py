"""dense_update local with K workers: the part of each worker's change that enters the PS vector
(merge sum 1, mean 1/K, sqrt 1/sqrt(K)), and dense_average.follow_merges, which moves a worker's
moving average of its weights by what a merge added to them (the other workers' changes)."""

from __future__ import annotations

import numpy as np
import pytest

from models.model_config import DenseAverageConfig, DenseMerge, ModelConfig
from tables.table_config import OptimizerConfig
from trainer.dense_sync import LocalDense, merge_share

from .shared_dense import SharedDense

SGD = OptimizerConfig(kind="sgd", lr=1.0)  # a step moves the weights by exactly -grad


@pytest.mark.parametrize("workers", [1, 2, 4, 9, 16])
def test_share_of_a_change_per_rule(workers: int) -> None:
    assert merge_share(DenseMerge.SUM, workers) == np.float32(1.0)
    assert merge_share(DenseMerge.MEAN, workers) == np.float32(1.0 / workers)
    assert merge_share(DenseMerge.SQRT, workers) == np.float32(1.0 / np.sqrt(workers))


def test_four_workers_changes_enter_halved_by_sqrt() -> None:
    store = SharedDense(np.zeros(3, np.float32), workers=4)
    grads = [np.float32([1, 0, 0]), np.float32([0, 2, 0]), np.float32([0, 0, 3]), np.float32([1, 1, 1])]
    workers = [LocalDense(np.zeros(3, np.float32), SGD, sync_steps=1, merge=DenseMerge.SQRT) for _ in grads]
    for w in workers:
        w.start(store)
    for w, g in zip(workers, grads, strict=True):
        assert w.update(g, store)
    np.testing.assert_allclose(store.dense, -0.5 * np.sum(grads, axis=0))
    workers[0].refresh(store)
    np.testing.assert_array_equal(workers[0].values, store.dense)


def _two_workers(follow: bool) -> tuple[LocalDense, LocalDense, SharedDense]:
    store = SharedDense(np.zeros(3, np.float32), workers=2)
    average = DenseAverageConfig(decay=0.5, follow_merges=follow)
    a, b = (LocalDense(np.zeros(3, np.float32), SGD, sync_steps=2, merge=DenseMerge.MEAN, average=average)
            for _ in range(2))
    a.start(store)
    b.start(store)
    return a, b, store


@pytest.mark.parametrize("follow", [False, True])
def test_a_merge_moves_the_average_by_the_others_change_only_when_following(follow: bool) -> None:
    a, b, store = _two_workers(follow)
    for g in (np.float32([1, 0, 2]), np.float32([0, 2, 0])):
        a.update(g, store)
        b.update(-g, store)  # b's two steps: its change +[1, 2, 2], a's -[1, 2, 2]
    before = a.served()
    values = a.values.copy()
    a.refresh(store)  # a sent -0.5*[1,2,2], b +0.5*[1,2,2]: the merged vector is the start, zeros
    jump = store.dense - values
    np.testing.assert_array_equal(a.values, store.dense)
    np.testing.assert_allclose(a.served(), before + jump if follow else before, rtol=1e-6, atol=1e-7)


def test_following_changes_nothing_for_one_worker() -> None:
    served = []
    for follow in (False, True):
        store = SharedDense(np.zeros(3, np.float32), workers=1)
        w = LocalDense(np.zeros(3, np.float32), SGD, sync_steps=2, merge=DenseMerge.MEAN,
                       average=DenseAverageConfig(decay=0.9, follow_merges=follow))
        w.start(store)
        for g in ([1, 2, 3], [0, 1, 0], [4, 0, 0], [1, 1, 1]):
            if w.update(np.float32(g), store):
                w.refresh(store)
        served.append(w.served())
    np.testing.assert_array_equal(served[0], served[1])


def test_config_takes_the_rule_and_the_flag() -> None:
    slots = [{"name": "a"}]
    model = ModelConfig(type="wide_deep", slots=slots, dense_merge="sqrt",
                        dense_average={"decay": 0.99, "follow_merges": True})
    assert model.dense_merge is DenseMerge.SQRT
    assert model.dense_average is not None and model.dense_average.follow_merges
    assert DenseAverageConfig(decay=0.99).follow_merges is False


def test_following_decays_per_step_as_many_steps_as_there_are_workers() -> None:
    store = SharedDense(np.zeros(3, np.float32), workers=4)
    w = LocalDense(np.zeros(3, np.float32), SGD, sync_steps=100, merge=DenseMerge.MEAN,
                   average=DenseAverageConfig(decay=0.9, follow_merges=True))
    w.start(store)
    iterates = []
    for g in ([1, 2, 3], [0, 1, 0], [4, 0, 0]):
        w.update(np.float32(g), store)
        iterates.append(w.values.copy())
    decay = 0.9**4
    weights = np.array([decay ** (len(iterates) - 1 - i) for i in range(len(iterates))])
    expected = (weights[:, None] * np.array(iterates, np.float64)).sum(0) / weights.sum()
    np.testing.assert_allclose(w.served(), expected, rtol=1e-5, atol=1e-6)
