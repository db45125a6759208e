"""The fused training kernels against slow numpy references: pooling with the wide sum, its
adjoint, the ReLU mask with the bias gradient, and an MLP step with reused buffers against a
fresh one (the numerical gradient checks of every model are in test_gradients.py)."""

from __future__ import annotations

import numpy as np
import pytest

from models import build_model
from models.layers import (
    MLP,
    ParamSet,
    bce_with_logits,
    outer_relu_grad_bias,
    pool_backward,
    pool_forward,
    relu_grad_bias,
)
from tests.models.helpers import random_batch, small_config


def _ragged(rng: np.random.Generator, n_slots: int, n: int, u: int) -> tuple[np.ndarray, np.ndarray]:
    lengths = rng.integers(0, 4, (n_slots, n))
    offs = np.zeros((n_slots, n + 1), np.int64)
    np.cumsum(lengths, axis=1, out=offs[:, 1:])
    offs[1:] += np.cumsum(offs[:-1, -1])[:, None]
    return rng.integers(0, u, offs[-1, -1]).astype(np.int64), offs


@pytest.mark.parametrize("n", [7, 40])  # 40: past the records whose output lines are prefetched ahead
def test_pool_forward_and_backward_with_the_wide_sum_match_a_slow_reference(n: int) -> None:
    rng = np.random.default_rng(0)
    n_slots, u, dim, col0 = 3, 5, 4, 2
    idx, offs = _ragged(rng, n_slots, n, u)
    mean = np.array([False, True, False])
    rows = rng.normal(size=(u, 1 + dim)).astype(np.float32)
    out = np.full((n, col0 + n_slots * dim + 1), 9.0, np.float32)
    wide = rng.normal(size=n).astype(np.float32)
    want_out, want_wide = out.copy(), wide.copy()
    for s in range(n_slots):
        for i in range(n):
            ids = idx[offs[s, i] : offs[s, i + 1]]
            pooled = rows[ids, 1:].sum(axis=0)
            if mean[s] and len(ids) > 1:
                pooled /= len(ids)
            want_out[i, col0 + s * dim : col0 + (s + 1) * dim] = pooled
            want_wide[i] += rows[ids, 0].sum()
    pool_forward(rows, idx, offs, 1, dim, mean, out, col0, wide, True)
    np.testing.assert_allclose(out, want_out, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(wide, want_wide, rtol=1e-5, atol=1e-6)

    dout = rng.normal(size=out.shape).astype(np.float32)
    dwide = rng.normal(size=n).astype(np.float32)
    grad = np.zeros_like(rows)
    want = np.zeros_like(rows)
    for s in range(n_slots):
        for i in range(n):
            ids = idx[offs[s, i] : offs[s, i + 1]]
            scale = 1.0 / len(ids) if mean[s] and len(ids) > 1 else 1.0
            for j in ids:
                want[j, 1:] += dout[i, col0 + s * dim : col0 + (s + 1) * dim] * scale
                want[j, 0] += dwide[i]
    pool_backward(dout, idx, offs, 1, dim, mean, grad, col0, dwide, True)
    np.testing.assert_allclose(grad, want, rtol=1e-5, atol=1e-5)
    # without the wide part the wide column is neither read into wide nor written
    grad2 = np.zeros_like(rows)
    pool_backward(dout, idx, offs, 1, dim, mean, grad2, col0, np.zeros(0, np.float32), False)
    assert not grad2[:, 0].any()
    np.testing.assert_allclose(grad2[:, 1:], want[:, 1:], rtol=1e-5, atol=1e-5)


def test_relu_grad_bias_masks_and_sums_columns() -> None:
    rng = np.random.default_rng(1)
    dx = rng.normal(size=(33, 17)).astype(np.float32)
    act = np.maximum(rng.normal(size=dx.shape), 0).astype(np.float32)
    want = np.where(act > 0, dx, 0)
    db = np.full(17, 5.0, np.float32)
    relu_grad_bias(dx, act, db)
    np.testing.assert_array_equal(dx, want)
    np.testing.assert_allclose(db, want.sum(axis=0), rtol=1e-5, atol=1e-5)


def test_outer_relu_grad_bias_is_the_masked_outer_product_and_its_column_sums() -> None:
    rng = np.random.default_rng(4)
    dy, w = rng.normal(size=13).astype(np.float32), rng.normal(size=7).astype(np.float32)
    act = np.maximum(rng.normal(size=(13, 7)), 0).astype(np.float32)
    want = np.where(act > 0, np.outer(dy, w), 0)
    dx, db = np.full((13, 7), 9.0, np.float32), np.full(7, 5.0, np.float32)
    outer_relu_grad_bias(dy, w, act, dx, db)
    np.testing.assert_allclose(dx, want, rtol=1e-6)
    np.testing.assert_allclose(db, want.sum(axis=0), rtol=1e-5, atol=1e-6)


def _mlp_with_inputs(sizes: list[int], seed: int, **kw: int) -> tuple[MLP, ParamSet, np.ndarray, np.ndarray]:
    """An MLP with perturbed initial weights, an 11-row input and an output gradient."""
    mlp = MLP("m", sizes, **kw)
    params = ParamSet(mlp.specs())
    rng = np.random.default_rng(seed)
    mlp.init(params, rng)
    params.values[...] += rng.normal(0, 0.1, params.values.shape).astype(np.float32)
    x = rng.normal(size=(11, sizes[0])).astype(np.float32)
    dy = rng.normal(size=(11, sizes[-1])).astype(np.float32)
    return mlp, params, x, dy


def test_mlp_with_one_output_and_fewer_input_gradient_columns_matches_numpy() -> None:
    """The one-logit top layer's fused input gradient and the input gradient cut to the first
    columns give what plain numpy does."""
    mlp, params, x, dy = _mlp_with_inputs([6, 8, 5, 1], 5, input_grad_cols=4)
    v = params.value
    h1 = np.maximum(x @ v["m.0.w"] + v["m.0.b"], 0)
    h2 = np.maximum(h1 @ v["m.1.w"] + v["m.1.b"], 0)
    np.testing.assert_allclose(mlp.forward(params, x, reuse=True), h2 @ v["m.2.w"] + v["m.2.b"], rtol=1e-5, atol=1e-6)
    dx = mlp.backward(params, dy)
    d2 = (dy @ v["m.2.w"].T) * (h2 > 0)
    d1 = (d2 @ v["m.1.w"].T) * (h1 > 0)
    np.testing.assert_allclose(params.grad["m.2.w"], h2.T @ dy, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(params.grad["m.1.b"], d2.sum(axis=0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(params.grad["m.1.w"], h1.T @ d2, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(params.grad["m.0.b"], d1.sum(axis=0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(params.grad["m.0.w"], x.T @ d1, rtol=1e-5, atol=1e-6)
    assert dx.shape == (11, 4)
    np.testing.assert_allclose(dx, (d1 @ v["m.0.w"].T)[:, :4], rtol=1e-5, atol=1e-6)


def test_mlp_with_reused_buffers_computes_what_fresh_outputs_do() -> None:
    mlp, params, x, dy = _mlp_with_inputs([6, 8, 5, 2], 2)
    fresh = mlp.forward(params, x).copy()
    dx_fresh = mlp.backward(params, dy).copy()
    g_fresh = params.grads.copy()
    params.grads[...] = 7.0  # backward writes every gradient: stale values must not survive
    for _ in range(2):  # the second step reuses the first one's buffers
        y = mlp.forward(params, x, reuse=True)
        np.testing.assert_allclose(y, fresh, rtol=1e-6)
        np.testing.assert_allclose(mlp.backward(params, dy), dx_fresh, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(params.grads, g_fresh, rtol=1e-5, atol=1e-6)
    assert mlp.forward(params, x, reuse=True) is y  # the same buffer, no allocation
    assert mlp.forward(params, x) is not y


def test_wide_deep_training_and_inference_paths_agree() -> None:
    """A model whose worker reuses buffers gives the logits and gradients of a fresh model, and
    its returned logits survive the next step."""
    fresh, reused = build_model(small_config("wide_deep")), build_model(small_config("wide_deep"))
    reused.reuse_buffers = True
    rng = np.random.default_rng(3)
    batches = [random_batch(9, seed=s) for s in (4, 5)]
    for b in batches:
        f = fresh.features(b)
        rows = {t: rng.normal(0, 0.5, (ti.keys.shape[0], fresh.row_width[t])).astype(np.float32)
                for t, ti in f.tables.items()}
        z1, z2 = fresh.forward(f, rows), reused.forward(f, rows)
        np.testing.assert_allclose(z2, z1, rtol=1e-5, atol=1e-6)
        d = (z1 - f.labels).astype(np.float32)
        g1, g2 = fresh.backward(d), reused.backward(d)
        for t in g1:
            np.testing.assert_allclose(g2[t], g1[t], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(reused.params.grads, fresh.params.grads, rtol=1e-5, atol=1e-6)
        kept = z2.copy()
        reused.forward(f, rows)
        np.testing.assert_array_equal(z2, kept)


def test_bce_with_logits_matches_the_float64_formula_for_any_logit():
    rng = np.random.default_rng(5)
    z = (rng.standard_normal(700) * 6).astype(np.float32)
    z[:5] = [200.0, -200.0, 0.0, 40.0, -40.0]  # exp overflows in the naive form
    y = (rng.random(700) < 0.4).astype(np.float32)
    loss, prob, dz = bce_with_logits(z, y)
    zz = z.astype(np.float64)
    p = 1.0 / (1.0 + np.exp(-zz))
    want = (np.maximum(zz, 0) - zz * y + np.log1p(np.exp(-np.abs(zz)))).mean()
    assert prob.dtype == dz.dtype == np.float32
    assert np.isfinite(loss) and abs(loss - want) < 1e-5 * max(1.0, want)
    np.testing.assert_allclose(prob, p, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(dz, (p - y) / 700, rtol=1e-5, atol=1e-10)
    assert bce_with_logits(np.zeros(0, np.float32), np.zeros(0, np.float32))[0] == 0.0
