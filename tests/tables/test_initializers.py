"""The row initializer kernel: deterministic per (seed, key, column), right distribution."""

from __future__ import annotations

import numpy as np
import pytest

from tables.initializers import initial_rows
from tables.sparse_table import SparseTable
from tables.table_config import InitializerConfig, OptimizerConfig, TableConfig

KEYS = np.random.default_rng(0).integers(0, 2**64 - 1, size=200_000, dtype=np.uint64, endpoint=True)


@pytest.mark.parametrize("kind", ["uniform", "normal", "zeros"])
def test_deterministic_per_seed_key_and_column(kind: str) -> None:
    a = initial_rows(KEYS[:1000], 8, seed=3, kind=kind, scale=0.5)
    assert a.dtype == np.float32 and a.shape == (1000, 8)
    np.testing.assert_array_equal(a, initial_rows(KEYS[:1000], 8, seed=3, kind=kind, scale=0.5))
    # A key's row does not depend on the batch around it, nor on the row width beyond its columns.
    np.testing.assert_array_equal(a[::-1], initial_rows(KEYS[:1000][::-1].copy(), 8, seed=3, kind=kind, scale=0.5))
    np.testing.assert_array_equal(a[:1, :3], initial_rows(KEYS[:1], 3, seed=3, kind=kind, scale=0.5))
    if kind == "zeros":
        assert not a.any()
        return
    assert not np.array_equal(a, initial_rows(KEYS[:1000], 8, seed=4, kind=kind, scale=0.5)), "seed matters"
    assert np.unique(a).shape[0] > 7900, "columns and keys get distinct values"
    special = initial_rows(np.array([0, 2**63, 2**64 - 1], np.uint64), 8, seed=3, kind=kind, scale=0.5)
    assert np.isfinite(special).all() and np.unique(special).shape[0] == 24


def test_uniform_distribution() -> None:
    scale = 0.25
    v = initial_rows(KEYS, 4, seed=1, kind="uniform", scale=scale).ravel()
    assert v.min() >= -scale and v.max() <= scale
    assert v.min() < -0.999 * scale and v.max() > 0.999 * scale
    assert abs(v.mean()) < 0.002  # std of the mean ~ 0.25/sqrt(3 * 800k) ~ 0.00016
    assert abs(v.var() - scale**2 / 3) < 0.01 * scale**2 / 3
    hist, _ = np.histogram(v, bins=10, range=(-scale, scale))
    assert (np.abs(hist / v.size - 0.1) < 0.003).all()
    assert abs(np.corrcoef(v.reshape(-1, 4)[:, 0], v.reshape(-1, 4)[:, 1])[0, 1]) < 0.01


def test_normal_distribution() -> None:
    scale = 0.1
    v = initial_rows(KEYS, 4, seed=2, kind="normal", scale=scale).ravel().astype(np.float64)
    assert np.isfinite(v).all()
    assert abs(v.mean()) < 0.001
    assert abs(v.std() - scale) < 0.01 * scale
    z = v / scale
    assert abs(np.mean(np.abs(z) < 1) - 0.6827) < 0.005
    assert abs(np.mean(np.abs(z) < 2) - 0.9545) < 0.003
    assert abs(np.mean(z**4) - 3.0) < 0.1  # kurtosis of a normal


def test_table_pulls_and_new_rows_use_the_initializer() -> None:
    cfg = TableConfig(name="t", dim=4, wide=True, seed=9, initializer=InitializerConfig(kind="normal", scale=0.3),
                      wide_initializer=InitializerConfig(kind="uniform", scale=0.2),
                      optimizer=OptimizerConfig(kind="sgd", lr=1.0), wide_optimizer=OptimizerConfig(kind="sgd"))
    t = SparseTable(cfg)
    keys = KEYS[:50]
    emb = initial_rows(keys, 4, seed=9, kind="normal", scale=0.3)
    pulled = t.pull(keys)
    np.testing.assert_array_equal(pulled[:, 1:], emb)
    wide = pulled[:, 0]
    assert np.abs(wide).max() <= 0.2 and np.unique(wide).shape[0] == 50
    assert not np.isin(wide, emb).any(), "the wide weight draws from its own seed"
    t.push(keys, np.zeros((50, 5), np.float32))  # created rows hold exactly what pulls showed
    np.testing.assert_array_equal(t.pull(keys), pulled)
    other = SparseTable(cfg.model_copy(update={"seed": 10}))
    assert not np.array_equal(other.pull(keys), pulled)
