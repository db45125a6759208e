"""tables.dense_optimizer: each rule against a slow numpy reference, and the moving average that
a step folds into its own pass (``average=``) equal to the separate pass it replaces."""

from __future__ import annotations

import numpy as np
import pytest

from tables.dense_optimizer import DenseOptimizer, moving_average
from tables.table_config import OptimizerConfig


def _reference_adam(w, g, m, v, t, c: OptimizerConfig, lr_scale: float = 1.0):
    """Kingma & Ba's Adam in float64, the clip and l2 applied first (the module's order)."""
    g = g.astype(np.float64)
    if c.grad_clip:
        g = np.clip(g, -c.grad_clip, c.grad_clip)
    g = g + c.l2 * w
    m = c.beta1 * m + (1 - c.beta1) * g
    v = c.beta2 * v + (1 - c.beta2) * g * g
    lr_t = c.lr * lr_scale * np.sqrt(1 - c.beta2**t) / (1 - c.beta1**t)
    return w - lr_t * m / (np.sqrt(v) + c.eps), m, v


@pytest.mark.parametrize("clip", [None, 0.02])
@pytest.mark.parametrize("l2", [0.0, 0.01])
def test_adam_matches_the_reference_over_steps(clip: float | None, l2: float) -> None:
    rng = np.random.default_rng(0)
    n = 1003  # not a multiple of a vector width: the loops' tails count too
    c = OptimizerConfig(kind="adam", lr=0.01, grad_clip=clip, l2=l2)
    w = rng.normal(size=n).astype(np.float32)
    opt = DenseOptimizer(c, w)
    ref_w, ref_m, ref_v = w.astype(np.float64), np.zeros(n), np.zeros(n)
    for t in range(1, 6):
        g = (rng.normal(size=n) * 0.05).astype(np.float32)
        scale = 0.5 if t == 3 else 1.0
        opt.step(w, g, lr_scale=scale)
        ref_w, ref_m, ref_v = _reference_adam(ref_w, g, ref_m, ref_v, t, c, scale)
    np.testing.assert_allclose(w, ref_w, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(opt.state["m"], ref_m, rtol=1e-4, atol=1e-7)
    np.testing.assert_allclose(opt.state["v"], ref_v, rtol=1e-4, atol=1e-9)
    assert opt.steps == 5


@pytest.mark.parametrize("kind", ["adam", "adagrad", "sgd", "ftrl"])
@pytest.mark.parametrize("clip", [None, 0.02])
def test_the_average_taken_in_the_step_equals_a_separate_pass(kind: str, clip: float | None) -> None:
    """Bit for bit: the fused pass runs the same float32 operations per element."""
    rng = np.random.default_rng(1)
    n = 517
    c = OptimizerConfig(kind=kind, lr=0.01, grad_clip=clip)
    w0 = rng.normal(size=n).astype(np.float32)
    fused_w, plain_w = w0.copy(), w0.copy()
    fused, plain = DenseOptimizer(c, fused_w), DenseOptimizer(c, plain_w)
    fused_acc, plain_acc = np.zeros(n, np.float32), np.zeros(n, np.float32)
    keep = np.float32(0.9)
    for _ in range(4):
        g = (rng.normal(size=n) * 0.05).astype(np.float32)
        fused.step(fused_w, g, average=(fused_acc, keep))
        plain.step(plain_w, g)
        moving_average(plain_acc, plain_w, keep)
    np.testing.assert_array_equal(fused_w, plain_w)
    np.testing.assert_array_equal(fused_acc, plain_acc)
    for k, v in plain.state.items():
        np.testing.assert_array_equal(fused.state[k], v)


def test_moving_average_matches_its_formula() -> None:
    rng = np.random.default_rng(2)
    acc, w = rng.normal(size=100).astype(np.float32), rng.normal(size=100).astype(np.float32)
    want = 0.75 * acc.astype(np.float64) + 0.25 * w
    moving_average(acc, w, np.float32(0.75))
    np.testing.assert_allclose(acc, want, rtol=1e-6, atol=1e-7)
