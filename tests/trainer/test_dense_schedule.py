"""model.dense_schedule: the dense optimizer's lr over a worker's steps (warm-up, then linear or
inverse-sqrt decay), counted by the optimizer's own step count (kept in a pass); dense_update: ps
and ftrl refuse it."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from core.errors import ConfigError
from models.model_config import DenseScheduleConfig
from tables.dense_optimizer import DenseOptimizer
from tables.table_config import OptimizerConfig
from trainer.dense_sync import LocalDense, make_dense
from trainer.job_config import DenseUpdate


class OneWorker:
    def __init__(self, initial: np.ndarray) -> None:
        self.dense = initial.copy()
        self.num_workers = 1

    def pull_dense(self) -> np.ndarray:
        return self.dense.copy()

    def add_dense(self, delta: np.ndarray) -> None:
        self.dense += delta


def test_factors() -> None:
    lin = DenseScheduleConfig(warmup_steps=4, decay_steps=10, end_factor=0.2)
    assert [lin.factor(t) for t in (1, 2, 4)] == [0.25, 0.5, 1.0]
    assert lin.factor(9) == pytest.approx(1 - 0.8 * 0.5)
    assert lin.factor(14) == pytest.approx(0.2) and lin.factor(1000) == pytest.approx(0.2)
    inv = DenseScheduleConfig(kind="inverse_sqrt", decay_steps=100)
    assert inv.factor(1) == pytest.approx((100 / 101) ** 0.5)
    assert inv.factor(300) == pytest.approx(0.5)


def test_sgd_steps_follow_the_schedule_and_resume_from_a_pass() -> None:
    sched = DenseScheduleConfig(decay_steps=4)  # 0.75, 0.5, 0.25, 0, 0, ...
    store = OneWorker(np.zeros(2, np.float32))
    d = LocalDense(np.zeros(2, np.float32), OptimizerConfig(kind="sgd", lr=1.0), schedule=sched)
    d.start(store)
    g = np.float32([1, -2])
    d.update(g, store)
    d.update(g, store)
    np.testing.assert_allclose(d.values, -(0.75 + 0.5) * g)
    resumed = LocalDense(np.zeros(2, np.float32), OptimizerConfig(kind="sgd", lr=1.0), schedule=sched)
    resumed.load_state({k: v.copy() for k, v in d.state().items()})
    resumed.values[...] = d.values
    for w in (d, resumed):
        for _ in range(3):
            w.optimizer.step(w.values, g, lr_scale=sched.factor(w.optimizer.steps + 1))
    np.testing.assert_allclose(resumed.values, -(0.75 + 0.5 + 0.25) * g)
    np.testing.assert_array_equal(resumed.values, d.values)


def test_adam_scaled_step_is_adam_at_the_scaled_rate() -> None:
    rng = np.random.default_rng(3)
    g = [rng.normal(size=16).astype(np.float32) for _ in range(3)]
    w_a, w_b = np.zeros(16, np.float32), np.zeros(16, np.float32)
    a = DenseOptimizer(OptimizerConfig(kind="adam", lr=1e-3), w_a)
    b = DenseOptimizer(OptimizerConfig(kind="adam", lr=5e-4), w_b)
    for gi in g:
        a.step(w_a, gi, lr_scale=0.5)
        b.step(w_b, gi)
    np.testing.assert_allclose(w_a, w_b, rtol=1e-6)


def test_refused_where_it_cannot_apply() -> None:
    sched = DenseScheduleConfig(decay_steps=10)
    with pytest.raises(ConfigError):
        make_dense(DenseUpdate.PS, np.zeros(2, np.float32), OptimizerConfig(kind="adam"), sync_steps=1, schedule=sched)
    with pytest.raises(ConfigError):
        LocalDense(np.zeros(2, np.float32), OptimizerConfig(kind="ftrl"), schedule=sched)
    for bad in ({"decay_steps": 0}, {"decay_steps": 5, "end_factor": 1.5}, {"decay_steps": 5, "warmup_steps": -1},
                {"decay_steps": 5, "kind": "cosine"}, {"decay_steps": 5, "lr": 0.1}, {}):
        with pytest.raises(ValidationError):
            DenseScheduleConfig.model_validate(bad)
