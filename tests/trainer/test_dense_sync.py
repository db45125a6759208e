"""dense_update local with several workers: each worker's change since its last merge enters the
PS dense vector whole (merge sum) or divided by the workers (merge mean: their models' average)."""

from __future__ import annotations

import numpy as np
import pytest

from models import build_model
from models.model_config import DenseMerge, ModelConfig
from tables.table_config import OptimizerConfig
from trainer.dense_sync import LocalDense

from .shared_dense import SharedDense

SGD = OptimizerConfig(kind="sgd", lr=1.0)  # a step moves the weights by exactly -grad


@pytest.mark.parametrize(("merge", "share"), [(DenseMerge.SUM, 1.0), (DenseMerge.MEAN, 0.5)])
def test_two_workers_changes_since_one_base_enter_whole_or_halved(merge: DenseMerge, share: float) -> None:
    start = np.zeros(4, np.float32)
    store = SharedDense(start, workers=2)
    a = LocalDense(start.copy(), SGD, sync_steps=2, merge=merge)
    b = LocalDense(start.copy(), SGD, sync_steps=2, merge=merge)
    a.start(store)
    b.start(store)
    ga, gb = np.float32([1, 0, 2, 0]), np.float32([1, 4, 0, 0])
    assert not a.update(ga, store)
    assert not b.update(gb, store)
    np.testing.assert_array_equal(store.dense, start)  # nothing sent between merges
    assert a.update(ga, store)
    assert b.update(gb, store)
    np.testing.assert_allclose(store.dense, -2 * share * (ga + gb))
    a.refresh(store)
    np.testing.assert_array_equal(a.values, store.dense)


def test_flush_sends_the_share_of_the_unsent_change() -> None:
    store = SharedDense(np.ones(3, np.float32), workers=2)
    w = LocalDense(np.ones(3, np.float32), SGD, sync_steps=8, merge=DenseMerge.MEAN)
    w.start(store)
    w.update(np.float32([2, 0, -2]), store)
    w.flush(store)
    np.testing.assert_allclose(store.dense, [0, 1, 2])
    np.testing.assert_array_equal(w.values, store.dense)


def test_one_worker_trains_the_same_either_way() -> None:
    runs = []
    for merge in DenseMerge:
        store = SharedDense(np.zeros(3, np.float32), workers=1)
        w = LocalDense(np.zeros(3, np.float32), SGD, sync_steps=2, merge=merge)
        w.start(store)
        for g in ([1, 2, 3], [0, 1, 0], [4, 0, 0]):
            if w.update(np.float32(g), store):
                w.refresh(store)
        w.flush(store)
        runs.append(store.dense.copy())
    np.testing.assert_array_equal(runs[0], runs[1])



def test_wide_deep_and_deepfm_merge_by_mean_others_by_sum() -> None:
    slots = [{"name": "a", "tower": "user"}, {"name": "b", "tower": "item"}]
    assert ModelConfig(type="wide_deep", slots=slots).dense_merge is DenseMerge.MEAN
    assert ModelConfig(type="deepfm", slots=slots).dense_merge is DenseMerge.MEAN
    assert ModelConfig(type="lr", slots=slots).dense_merge is DenseMerge.SUM
    assert ModelConfig(type="two_tower", slots=slots).dense_merge is DenseMerge.SUM
    assert ModelConfig(type="wide_deep", slots=slots, dense_merge="sum").dense_merge is DenseMerge.SUM
    model = build_model(ModelConfig(type="wide_deep", slots=slots, mlp=(4,), embedding_dim=2))
    assert model.config.dense_merge is DenseMerge.MEAN
