"""SparseTable.push(unique=True): the caller's promise of no repeated keys skips the dedupe
pass; a broken promise never corrupts the table."""

from __future__ import annotations

import numpy as np

from tables.sparse_table import SparseTable
from tables.table_config import OptimizerConfig, TableConfig

CFG = TableConfig(name="t", dim=3, wide=True, optimizer=OptimizerConfig(kind="adagrad", lr=0.1))


def _grads(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, CFG.width)).astype(np.float32)


def test_unique_keys_update_as_the_deduplicating_push_does() -> None:
    a, b = SparseTable(CFG), SparseTable(CFG)
    keys = np.random.default_rng(1).permutation(np.arange(1, 3001, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15))
    for step in range(3):
        g = _grads(3000, step)
        shows = np.full(3000, 2.0, np.float32)
        a.push(keys, g, shows, shows * 0, unique=True)
        b.push(keys, g, shows, shows * 0)
    np.testing.assert_array_equal(a.pull(keys), b.pull(keys))
    np.testing.assert_array_equal(a.counts(keys)[0], b.counts(keys)[0])
    assert a.size() == b.size() == 3000


def test_repeated_new_ids_under_the_flag_are_deduplicated_not_indexed_twice() -> None:
    a, b = SparseTable(CFG), SparseTable(CFG)
    keys = np.array([7, 9, 7, 11, 9, 7], np.uint64)  # the promise broken, all ids new
    g = _grads(6, 3)
    a.push(keys, g, unique=True)
    b.push(keys, g)
    assert a.size() == 3
    np.testing.assert_array_equal(a.lookup_rows(np.array([7, 9, 11], np.uint64)), [0, 1, 2])
    np.testing.assert_array_equal(a.pull(keys), b.pull(keys))  # summed, as without the flag


def test_a_repeated_stored_id_under_the_flag_gets_one_update_per_occurrence() -> None:
    a, b = SparseTable(CFG), SparseTable(CFG)
    for t in (a, b):
        t.push(np.array([5, 6], np.uint64), _grads(2, 4))
    g = _grads(1, 5)
    a.push(np.array([5, 5, 6], np.uint64), np.concatenate([g, g, g]), unique=True)
    b.push(np.array([5, 6], np.uint64), np.concatenate([g, g]))
    b.push(np.array([5], np.uint64), g)
    assert a.size() == 2
    np.testing.assert_allclose(a.pull(np.array([5, 6], np.uint64)), b.pull(np.array([5, 6], np.uint64)), rtol=1e-6)
