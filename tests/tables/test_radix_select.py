"""The radix select against numpy's partition: the k-th smallest float32, ties, infinities,
signed zeros and negatives among them."""

from __future__ import annotations

import numpy as np
import pytest

from tables.radix_select import kth_smallest


def keys(kind: str, n: int, rng: np.random.Generator) -> np.ndarray:
    if kind == "normal":
        return rng.standard_normal(n).astype(np.float32)
    if kind == "few values":  # decayed small show counts: many ties
        return (rng.integers(0, 5, n) * np.float32(0.9) ** rng.integers(0, 4, n)).astype(np.float32)
    if kind == "signed":
        return rng.integers(-3, 4, n).astype(np.float32)
    x = rng.standard_normal(n).astype(np.float32)  # protected rows are +inf; zeros of both signs
    x[rng.random(n) < 0.2] = np.inf
    x[rng.random(n) < 0.1] = -0.0
    x[rng.random(n) < 0.1] = 0.0
    return x


@pytest.mark.parametrize("kind", ["normal", "few values", "signed", "inf and zeros"])
def test_the_kth_smallest_is_numpys(kind: str) -> None:
    rng = np.random.default_rng(len(kind))
    for _ in range(300):
        x = keys(kind, int(rng.integers(1, 3000)), rng)
        k = int(rng.integers(0, x.shape[0]))
        assert kth_smallest(x, k) == np.partition(x, k)[k]
    x = keys(kind, 5, rng)
    assert kth_smallest(x, 0) == x.min() and kth_smallest(x, 4) == x.max()
