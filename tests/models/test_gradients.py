"""Every model's backward pass against central finite differences of its loss."""

from __future__ import annotations

import numpy as np
import pytest

from models import build_model
from models.layers import bce_with_logits
from tests.models.helpers import central_difference, random_batch, small_config

MODELS = ["lr", "wide_deep", "deepfm", "two_tower"]


def _loss(model, f, rows) -> float:
    # summed and in float64: larger differences, less rounding noise
    z = model.forward(f, rows).astype(np.float64)
    return float((np.maximum(z, 0) - z * f.labels + np.log1p(np.exp(-np.abs(z)))).sum())


@pytest.mark.parametrize("kind", MODELS)
def test_backward_matches_numerical_gradients(kind: str) -> None:
    model = build_model(small_config(kind, **({"retrieval": {"loss": "pointwise"}} if kind == "two_tower" else {})))
    f = model.features(random_batch(9, seed=1))
    rng = np.random.default_rng(8)  # a seed with no ReLU input within eps of 0 (kinks break differences)
    rows = {t: rng.normal(0, 0.5, (ti.keys.shape[0], model.row_width[t])).astype(np.float32)
            for t, ti in f.tables.items()}
    model.params.values[...] += rng.normal(0, 0.05, model.params.values.shape).astype(np.float32)
    _, _, dlogits = bce_with_logits(model.forward(f, rows), f.labels)
    model.params.grads[...] = 7.0  # a previous step's gradients: backward must not add to them
    sparse = model.backward(dlogits * f.n)
    dense = model.params.grads.copy()
    eps = 1e-3

    def numeric(arr: np.ndarray, i: int) -> float:
        return central_difference(lambda: _loss(model, f, rows), arr, i, eps)

    picks = rng.choice(dense.size, min(60, dense.size), replace=False)
    want = np.array([numeric(model.params.values, int(i)) for i in picks])
    np.testing.assert_allclose(dense[picks], want, rtol=3e-2, atol=3e-3)
    for t, g in sparse.items():
        want = np.array([numeric(rows[t], i) for i in range(g.size)]).reshape(g.shape)
        np.testing.assert_allclose(g, want, rtol=3e-2, atol=3e-3, err_msg=f"table {t}")
        assert np.abs(g).sum() > 0
