"""Live freshness counts from receipt: a push carries when its records were received
(the batch's newest Kafka time, ``PSClient.received_at``) and the changed-keys log keeps that
time for its keys, so readers (the service's live path) measure from receipt, not from the push."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tables.sparse_table import SparseTable
from tables.table_config import TableConfig
from tests.ps.ps_harness import shard_processes

EMB = {"name": "emb", "dim": 4, "optimizer": {"kind": "sgd", "lr": 1.0}}


def test_a_push_records_its_receipt_time_in_the_log_else_the_push_time() -> None:
    t = SparseTable(TableConfig(name="t", dim=2))
    start = t.changes.read(0, 0, 100)  # activates the log
    t.push(np.array([1, 2], np.uint64), np.ones((2, 2), np.float32), received_at=1_700_000_000.5)
    t.push(np.array([3], np.uint64), np.ones((1, 2), np.float32))
    got = t.changes.read(start.generation, start.seq, 100)
    assert got.keys.tolist() == [1, 2, 3]
    assert got.times[:2].tolist() == [1_700_000_000.5] * 2 and got.times[2] > 1_700_000_000.5


@pytest.mark.process
def test_the_receipt_time_travels_with_the_push_to_the_shards(tmp_path: Path) -> None:
    with shard_processes(tmp_path, [EMB], n=2) as shards, shards.client() as c:
        start = c.wait(c.changes("emb", [(0, 0), (0, 0)], limit=100))
        c.received_at = 1_600_000_000.25
        keys = np.arange(1, 21, dtype=np.uint64)
        c.wait(c.push("emb", keys, np.ones((20, 4), np.float32)))
        got = c.wait(c.changes("emb", [(x.generation, x.seq) for x in start], limit=100))
        assert sorted(np.concatenate([x.keys for x in got]).tolist()) == keys.tolist()
        assert set(np.concatenate([x.times for x in got]).tolist()) == {1_600_000_000.25}
