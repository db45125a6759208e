"""Element-wise Adagrad (``accumulator: element``) keeps ``dim`` accumulators per row: saves,
loads, shrink and delta chains must carry them, and a row-wise save must not load into it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from core.errors import Conflict
from tables.sparse_table import SparseTable
from tables.table_config import OptimizerConfig

from .save_support import POOL, TTL0, assert_same, config, push, view

ELEMENT = OptimizerConfig(kind="adagrad", lr=0.05, l2=0.01, initial_accumulator=0.001, accumulator="element")


def element_config(**kw: object) -> object:
    return config(**kw).model_copy(update={"optimizer": ELEMENT})


def accumulators(t: SparseTable, keys: np.ndarray) -> np.ndarray:
    rows = t.lookup_rows(keys)
    return t.state.rows.cols["state"][rows]


def test_accumulators_survive_base_delta_and_shrink(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    a = SparseTable(element_config(initial_capacity=16))
    assert a.state.rows.cols["state"].shape[1] == 3
    push(a, POOL[:80], rng)
    a.save(tmp_path / "base")
    a.end_pass()
    push(a, POOL[40:120], rng)
    assert a.shrink(policy=TTL0) == 40  # POOL[:40] go; the last rows move into their holes
    a.save(tmp_path / "d1", mode="delta")

    b = SparseTable(element_config(initial_capacity=16))
    b.load(tmp_path / "base")
    b.load(tmp_path / "d1")
    assert_same(view(a), view(b))
    kept = POOL[40:120]
    acc = accumulators(a, kept)
    assert np.unique(acc[:, 0]).shape[0] > 1 and not np.allclose(acc[:, 0], acc[:, 1])  # really per element
    np.testing.assert_array_equal(accumulators(b, kept), acc)
    # The restored accumulators drive the next steps exactly as the originals do.
    keys = POOL[60:140]
    grads = (rng.normal(size=(keys.shape[0], a.width)) * 0.2).astype(np.float32)
    a.push(keys, grads)
    b.push(keys, grads)
    assert_same(view(a), view(b))


def test_a_row_wise_save_does_not_load_into_an_element_wise_table(tmp_path: Path) -> None:
    rng = np.random.default_rng(6)
    rowwise = SparseTable(config())
    push(rowwise, POOL[:20], rng)
    rowwise.save(tmp_path / "rowwise")
    with pytest.raises(Conflict, match="accumulator"):
        SparseTable(element_config()).load(tmp_path / "rowwise")
    element = SparseTable(element_config())
    push(element, POOL[:20], rng)
    element.save(tmp_path / "element")
    with pytest.raises(Conflict, match="accumulator"):
        SparseTable(config()).load(tmp_path / "element")
