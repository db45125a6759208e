"""Existing-only pulls (the service's read-through): stored rows with a found mask, never an
invented row, through real shard processes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tables.sparse_table import SparseTable
from tables.table_config import OptimizerConfig, TableConfig

from .ps_harness import shard_processes

EMB = {"name": "emb", "dim": 4, "optimizer": {"kind": "sgd", "lr": 1.0}}


@pytest.mark.process
def test_existing_only_pull_reports_missing_ids_and_returns_stored_rows(tmp_path: Path) -> None:
    stored = np.array([0, 7, 2**63, 2**64 - 1, 12345], np.uint64)
    grads = np.arange(stored.shape[0] * 4, dtype=np.float32).reshape(-1, 4)
    with shard_processes(tmp_path, [EMB], n=2) as shards, shards.client() as c:
        c.wait(c.push("emb", stored, grads))
        ask = np.array([7, 99, 2**64 - 1, 7, 5, 0], np.uint64)  # duplicates and absent ids mixed in
        rows, found = c.wait(c.pull_existing("emb", ask))
        assert found.tolist() == [True, False, True, True, False, True]
        assert not rows[~found].any(), "absent ids read as zeros, not initializer rows"
        expected = c.wait(c.pull("emb", ask))  # the plain pull of the same ids, for the stored ones
        np.testing.assert_array_equal(rows[found], expected[found])
        stats = c.admin.stats()
        assert sum(s["tables"]["emb"]["rows"] for s in stats) == stored.shape[0], "read-through created no rows"


def test_in_process_pull_existing_matches_pull_for_stored_rows() -> None:
    t = SparseTable(TableConfig(name="t", dim=3, wide=True, optimizer=OptimizerConfig(kind="adagrad")))
    keys = np.array([1, 2, 3], np.uint64)
    t.push(keys, np.ones((3, 4), np.float32))
    rows, found = t.pull_existing(np.array([3, 4, 1], np.uint64))
    assert found.tolist() == [True, False, True]
    np.testing.assert_array_equal(rows[[0, 2]], t.pull(np.array([3, 1], np.uint64)))
    assert not rows[1].any() and t.size() == 3 and t.stats()["rejected_pulls"] == 0, "pull_existing counts nothing"
