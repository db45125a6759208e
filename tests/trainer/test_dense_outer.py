"""model.dense_outer: each worker's merged change goes through an outer step (lr, Nesterov or
heavy-ball momentum over its own merges), checked against a slow per-element reference."""

from __future__ import annotations

import numpy as np
import pytest

from models.model_config import DenseMerge, DenseOuterConfig, DenseScheduleConfig, ModelConfig
from tables.dense_optimizer import DenseOptimizer
from tables.table_config import OptimizerConfig
from trainer.dense_sync import LocalDense, PSDense, make_dense
from trainer.job_config import DenseUpdate

from .shared_dense import SharedDense

SGD = OptimizerConfig(kind="sgd", lr=1.0)  # a step moves the weights by exactly -grad
ADAM = OptimizerConfig(kind="adam", lr=0.01)


def reference_sent(changes: list[list[float]], lr: float, momentum: float, nesterov: bool) -> list[list[float]]:
    """What one worker adds at each merge, element by element in Python floats."""
    u = [0.0] * len(changes[0])
    out = []
    for g in changes:
        sent = []
        for i, gi in enumerate(g):
            u[i] = momentum * u[i] + gi
            sent.append(lr * (gi + momentum * u[i] if nesterov else u[i]))
        out.append(sent)
    return out


def run_worker(grads: list[np.ndarray], outer: DenseOuterConfig | None, *, workers: int = 1,
               sync_steps: int = 2, optimizer: OptimizerConfig = SGD) -> tuple[SharedDense, list[np.ndarray]]:
    """One worker's steps; returns the store and what it added at each merge."""
    store = SharedDense(np.zeros(grads[0].shape[0], np.float32), workers=workers)
    sent: list[np.ndarray] = []
    add = store.add_dense
    store.add_dense = lambda d: (sent.append(d.copy()), add(d))  # type: ignore[method-assign]
    w = LocalDense(np.zeros_like(store.dense), optimizer, sync_steps=sync_steps, merge=DenseMerge.MEAN, outer=outer)
    w.start(store)
    for g in grads:
        if w.update(g, store):
            w.refresh(store)
    return store, sent


GRADS = [np.float32(g) for g in ([1, -2, 0.5], [0.25, 1, -1], [-3, 0, 2], [1, 1, 1], [0.5, -0.5, 4], [2, 0, -1])]


@pytest.mark.parametrize(("lr", "momentum", "nesterov"), [(1.0, 0.5, True), (2.0, 0.9, True), (1.5, 0.8, False),
                                                         (3.0, 0.0, True)])
def test_each_merge_adds_the_outer_step_of_the_reference(lr: float, momentum: float, nesterov: bool) -> None:
    outer = DenseOuterConfig(lr=lr, momentum=momentum, nesterov=nesterov)
    store, sent = run_worker(GRADS, outer, workers=2)
    # SGD at lr 1 from the merged value: a merge round's change is minus its 2 gradients, halved by mean
    changes = [(-(GRADS[i] + GRADS[i + 1]) / 2).tolist() for i in range(0, len(GRADS), 2)]
    expected = reference_sent(changes, lr, momentum, nesterov)
    np.testing.assert_allclose(np.stack(sent), np.float32(expected), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(store.dense, np.sum(expected, axis=0), rtol=1e-6, atol=1e-6)


def test_without_momentum_at_lr_1_it_is_the_plain_merge() -> None:
    plain, _ = run_worker(GRADS, None, workers=2)
    outer, _ = run_worker(GRADS, DenseOuterConfig(), workers=2)
    np.testing.assert_array_equal(plain.dense, outer.dense)


def test_workers_momenta_sum_to_the_momentum_of_the_summed_change() -> None:
    """Two workers merging in turn add what one outer step on their summed changes would add."""
    cfg = DenseOuterConfig(lr=1.5, momentum=0.7)
    store = SharedDense(np.zeros(3, np.float32), workers=2)
    workers = [LocalDense(np.zeros(3, np.float32), SGD, sync_steps=1, merge=DenseMerge.MEAN, outer=cfg)
               for _ in range(2)]
    for w in workers:
        w.start(store)
    rng = np.random.default_rng(0)
    summed = []
    for _ in range(5):  # both take a step from the same merged value, then both merge
        g = rng.normal(size=(2, 3)).astype(np.float32)
        for w, gi in zip(workers, g, strict=True):
            w.update(gi, store)
        for w in workers:
            w.refresh(store)
        summed.append((-(g[0] + g[1]) / 2).tolist())
    np.testing.assert_allclose(store.dense, np.sum(reference_sent(summed, 1.5, 0.7, True), axis=0), rtol=1e-5)


def test_reset_moments_makes_the_step_after_a_merge_a_fresh_optimizers() -> None:
    cfg = DenseOuterConfig(reset_moments=True)
    store = SharedDense(np.zeros(3, np.float32), workers=2)
    w = LocalDense(np.zeros(3, np.float32), ADAM, sync_steps=2, merge=DenseMerge.MEAN, outer=cfg)
    w.start(store)
    for g in GRADS[:2]:
        if w.update(g, store):
            w.refresh(store)
    assert w.optimizer.steps == 0
    start = w.values.copy()
    w.update(GRADS[2], store)
    fresh_w = start.copy()
    DenseOptimizer(ADAM, fresh_w).step(fresh_w, GRADS[2])
    np.testing.assert_array_equal(w.values, fresh_w)


def test_a_schedule_counts_the_steps_across_restarts() -> None:
    """With reset_moments the warm-up goes on over the worker's steps, not the restarted optimizer's."""
    schedule = DenseScheduleConfig(warmup_steps=4, decay_steps=1, end_factor=1.0)
    store = SharedDense(np.zeros(3, np.float32), workers=2)
    w = LocalDense(np.zeros(3, np.float32), SGD, sync_steps=2, merge=DenseMerge.SUM, schedule=schedule,
                   outer=DenseOuterConfig(reset_moments=True))
    w.start(store)
    moves = []
    for _ in range(6):
        before = w.values.copy()
        if w.update(np.float32([1, 1, 1]), store):
            w.refresh(store)
        moves.append(float(before[0] - w.values[0]))
    np.testing.assert_allclose(moves, [0.25, 0.5, 0.75, 1.0, 1.0, 1.0])
    assert w.state()["outer_t"][0] == 6


def test_one_worker_keeps_its_moments_whatever_the_rule() -> None:
    runs = []
    for outer in (None, DenseOuterConfig(reset_moments=True)):
        store = SharedDense(np.zeros(3, np.float32), workers=1)
        w = LocalDense(np.zeros(3, np.float32), ADAM, sync_steps=2, merge=DenseMerge.MEAN, outer=outer)
        w.start(store)
        for g in GRADS:
            if w.update(g, store):
                w.refresh(store)
        runs.append(store.dense.copy())
    np.testing.assert_array_equal(runs[0], runs[1])


def test_keeping_the_moments_carries_the_step_count_across_merges() -> None:
    store = SharedDense(np.zeros(3, np.float32), workers=1)
    w = LocalDense(np.zeros(3, np.float32), ADAM, sync_steps=2, merge=DenseMerge.MEAN, outer=DenseOuterConfig())
    w.start(store)
    for g in GRADS[:3]:
        if w.update(g, store):
            w.refresh(store)
    assert w.optimizer.steps == 3


def test_the_momentum_is_in_the_workers_state_and_comes_back() -> None:
    cfg = DenseOuterConfig(momentum=0.5)
    _, sent = run_worker(GRADS[:2], cfg)
    store = SharedDense(np.zeros(3, np.float32))
    w = LocalDense(np.zeros(3, np.float32), SGD, sync_steps=2, merge=DenseMerge.MEAN, outer=cfg)
    w.start(store)
    w.update(GRADS[0], store)
    w.update(GRADS[1], store)
    saved = {k: v.copy() for k, v in w.state().items()}
    np.testing.assert_allclose(saved["outer_u"], sent[0] / 1.5)  # u = g at the first merge; sent = g + 0.5 u
    again = LocalDense(np.zeros(3, np.float32), SGD, sync_steps=2, merge=DenseMerge.MEAN, outer=cfg)
    again.load_state(saved)
    np.testing.assert_array_equal(again.outer.u, saved["outer_u"])


def test_wide_deep_and_deepfm_keep_their_moments_without_momentum_among_workers_by_default() -> None:
    slots = [{"name": "a", "tower": "user"}, {"name": "b", "tower": "item"}]
    for kind in ("wide_deep", "deepfm"):
        assert ModelConfig(type=kind, slots=slots).dense_outer == DenseOuterConfig(reset_moments=False,
                                                                                   beta1_with_workers=0.0)
    assert ModelConfig(type="lr", slots=slots).dense_outer is None
    assert ModelConfig(type="wide_deep", slots=slots, dense_outer=None).dense_outer is None


def test_ps_has_no_merges_to_step() -> None:
    dense = make_dense(DenseUpdate.PS, np.zeros(3, np.float32), ADAM, sync_steps=1,
                       outer=DenseOuterConfig(reset_moments=True))
    assert isinstance(dense, PSDense)


def test_ftrl_keeps_its_state_its_weights_across_merges() -> None:
    ftrl = OptimizerConfig(kind="ftrl", lr=0.1)
    store = SharedDense(np.zeros(3, np.float32), workers=2)
    w = LocalDense(np.zeros(3, np.float32), ftrl, sync_steps=1, merge=DenseMerge.SUM,
                   outer=DenseOuterConfig(reset_moments=True))
    w.start(store)
    w.update(GRADS[0], store)
    assert w.optimizer.steps == 1 and np.any(w.optimizer.state["n"] > 0)


def test_a_momentum_of_1_is_refused() -> None:
    with pytest.raises(ValueError, match="momentum"):
        DenseOuterConfig(momentum=1.0)


def test_among_several_workers_adam_takes_beta1_with_workers_and_keeps_its_state() -> None:
    cfg = DenseOuterConfig(beta1_with_workers=0.0)
    alone = LocalDense(np.zeros(3, np.float32), ADAM, outer=cfg)
    alone.start(SharedDense(np.zeros(3, np.float32), workers=1))
    assert alone.optimizer.config.beta1 == ADAM.beta1  # one worker: the optimizer as configured
    store = SharedDense(np.zeros(3, np.float32), workers=2)
    w = LocalDense(np.zeros(3, np.float32), ADAM, sync_steps=100, outer=cfg)
    w.start(store)
    assert w.optimizer.config.beta1 == 0.0
    w.update(GRADS[0], store)
    saved = {k: v.copy() for k, v in w.state().items()}
    w.start(store)  # a refresh keeps the state
    np.testing.assert_array_equal(w.optimizer.state["m"], saved["m"])
    before = w.values.copy()
    w.update(GRADS[1], store)
    # beta1 0: m is this step's gradient, and the step is lr * m_hat / (sqrt(v_hat) + eps), per element
    t, b2 = 2, ADAM.beta2
    v = b2 * saved["v"].astype(np.float64) + (1 - b2) * GRADS[1].astype(np.float64) ** 2
    step = ADAM.lr * GRADS[1] / (np.sqrt(v / (1 - b2**t)) + ADAM.eps)
    np.testing.assert_allclose(before - w.values, step, rtol=1e-4)
