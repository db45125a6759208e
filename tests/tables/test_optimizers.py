"""SparseTable pull/push equal the slow pure-Python reference, for every optimizer."""

from __future__ import annotations

import numpy as np
import pytest

from tables.sparse_table import SparseTable
from tables.table_config import InitializerConfig, OptimizerConfig, TableConfig

from .reference_table import ReferenceTable

KINDS = ["sgd", "adagrad", "adagrad_element", "adam", "ftrl"]  # adagrad_element: accumulator "element"
# The wide weight runs another rule than the embedding, so a mix-up of the two would show.
WIDE_FOR = {"sgd": "ftrl", "adagrad": "adam", "adagrad_element": "adagrad", "adam": "sgd", "ftrl": "adagrad_element"}
POOL = np.array([0, 1, 2**63, 2**64 - 1, 2**32, 2**32 - 1, *range(7, 7 + 34)], np.uint64)


def optimizer(kind: str, regularized: bool) -> OptimizerConfig:
    lr = {"sgd": 0.1, "adagrad": 0.05, "adagrad_element": 0.05, "adam": 0.01, "ftrl": 0.1}[kind]
    extra: dict = {}
    if kind == "adagrad_element":
        kind, extra["accumulator"] = "adagrad", "element"
    if regularized:
        extra.update(l2=0.3, grad_clip=0.05)
        if kind == "ftrl":
            extra["l1"] = 0.002
        if kind == "adagrad":
            extra["initial_accumulator"] = 0.01
    return OptimizerConfig(kind=kind, lr=lr, **extra)


def run_both(cfg: TableConfig, pushes: int = 6, seed: int = 0) -> None:
    """Random batches with duplicate keys; compare the pulls of the whole pool after every push."""
    rng = np.random.default_rng(seed)
    table, ref = SparseTable(cfg), ReferenceTable(cfg)
    np.testing.assert_allclose(table.pull(POOL), ref.pull(POOL), rtol=1e-5, atol=1e-6)
    for _ in range(pushes):
        keys = rng.choice(POOL[:30], size=48)  # POOL[30:] is never pushed: reads stay initial
        assert np.unique(keys).shape[0] < keys.shape[0], "the batch must hold duplicates"
        grads = (rng.normal(size=(48, cfg.width)) * 0.1).astype(np.float32)
        table.push(keys, grads)
        ref.push(keys, grads)
        np.testing.assert_allclose(table.pull(POOL), ref.pull(POOL), rtol=1e-5, atol=1e-6)
    assert table.size() == len(ref.rows)
    assert table.contains(POOL).tolist() == [int(k) in ref.rows for k in POOL]


@pytest.mark.parametrize("regularized", [False, True], ids=["plain", "l2_clip"])
@pytest.mark.parametrize("wide", [False, True], ids=["emb", "wide"])
@pytest.mark.parametrize("kind", KINDS)
def test_matches_reference(kind: str, wide: bool, regularized: bool) -> None:
    cfg = TableConfig(
        name="t", dim=5, wide=wide, seed=11,
        initializer=InitializerConfig(kind="uniform", scale=0.05),
        wide_initializer=InitializerConfig(kind="normal", scale=0.02),
        optimizer=optimizer(kind, regularized),
        wide_optimizer=optimizer(WIDE_FOR[kind], regularized),
    )
    run_both(cfg)


@pytest.mark.parametrize("kind", KINDS)
def test_zero_initial_rows_and_large_batches(kind: str) -> None:
    """Zero rows (ftrl starts at z = 0) and gradients large enough that clipping dominates."""
    opt = optimizer(kind, False).model_copy(update={"lr": 0.05, "grad_clip": 0.5, "l2": 0.1})
    cfg = TableConfig(name="t", dim=3, wide=True, initializer=InitializerConfig(kind="zeros"),
                      optimizer=opt, wide_optimizer=opt)
    run_both(cfg, pushes=4, seed=3)


def test_duplicates_are_summed_before_the_update() -> None:
    """Adagrad is not linear in g: one push of (g, g) must equal one push of 2g, not two pushes of g."""
    cfg = TableConfig(name="t", dim=2, optimizer=OptimizerConfig(kind="adagrad", lr=0.1))
    a, b = SparseTable(cfg), SparseTable(cfg)
    g = np.array([[0.3, -0.2]], np.float32)
    a.push(np.array([9, 9], np.uint64), np.vstack([g, g]))
    b.push(np.array([9], np.uint64), 2 * g)
    np.testing.assert_array_equal(a.pull([9]), b.pull([9]))
    c = SparseTable(cfg)
    c.push([9], g)
    c.push([9], g)
    assert not np.allclose(a.pull([9]), c.pull([9]))


def test_adagrad_has_one_accumulator_per_row() -> None:
    """Both elements of a row take the same step size lr / sqrt(mean(g^2)), from zero initial rows."""
    cfg = TableConfig(name="t", dim=2, initializer=InitializerConfig(kind="zeros"),
                      optimizer=OptimizerConfig(kind="adagrad", lr=0.1, eps=1e-8))
    t = SparseTable(cfg)
    t.push([4], np.array([[3.0, 4.0]], np.float32))
    acc = (9.0 + 16.0) / 2
    np.testing.assert_allclose(t.pull([4])[0], [-0.1 * 3 / np.sqrt(acc), -0.1 * 4 / np.sqrt(acc)], rtol=1e-6)


def test_element_wise_adagrad_has_one_accumulator_per_element() -> None:
    """Each element takes its own step lr * g_j / sqrt(a_j): from zero rows, -lr * sign(g_j) on the
    first push; a second push of (g, 0) moves only the first element, by lr * g / sqrt(2 g^2)."""
    cfg = TableConfig(name="t", dim=2, initializer=InitializerConfig(kind="zeros"),
                      optimizer=OptimizerConfig(kind="adagrad", lr=0.1, eps=1e-8, accumulator="element"))
    t = SparseTable(cfg)
    t.push([4], np.array([[3.0, -4.0]], np.float32))
    np.testing.assert_allclose(t.pull([4])[0], [-0.1, 0.1], rtol=1e-6)
    t.push([4], np.array([[3.0, 0.0]], np.float32))
    np.testing.assert_allclose(t.pull([4])[0], [-0.1 - 0.1 / np.sqrt(2.0), 0.1], rtol=1e-6)
    assert t.state.rows.cols["state"].shape[1] == 2  # dim accumulator floats per row, not 1
