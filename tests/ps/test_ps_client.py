"""PSClient's four verbs through real shard processes: push_pull returns the rows its own push
updated, several tickets may be in flight, dense arrays follow the same ticket convention."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from core.errors import InvalidInput, NotFound

from .ps_harness import shard_processes

SGD1 = {"name": "emb", "dim": 4, "optimizer": {"kind": "sgd", "lr": 1.0}, "initializer": {"kind": "zeros"}}


def test_push_pull_returns_the_rows_after_its_push(tmp_path: Path) -> None:
    keys = np.array([5, 1, 5, 2**64 - 1, 9], np.uint64)  # a repeated key: its gradients are summed
    grads = np.ones((5, 4), np.float32)
    with shard_processes(tmp_path, [SGD1], n=2) as shards, shards.client() as c:
        rows = c.wait(c.push_pull("emb", keys, grads))
        np.testing.assert_array_equal(rows[:, 0], [-2.0, -1.0, -2.0, -1.0, -1.0])
        np.testing.assert_array_equal(c.wait(c.pull("emb", keys)), rows)


def test_tickets_in_flight_complete_in_any_order(tmp_path: Path) -> None:
    a, b = np.arange(100, dtype=np.uint64), np.arange(50, 150, dtype=np.uint64)
    with shard_processes(tmp_path, [SGD1], n=2) as shards, shards.client() as c:
        push = c.push("emb", a, np.ones((100, 4), np.float32))
        pull = c.pull("emb", b)  # started after the push on the same ordered connections: it sees it
        rows = c.wait(pull)
        assert c.wait(push) is None
        np.testing.assert_array_equal(rows[:, 0], np.where(b < 100, -1.0, 0.0))
        with pytest.raises(InvalidInput, match="uint64"):
            c.pull("emb", b.astype(np.int64))


def test_dense_pull_and_push_are_tickets(tmp_path: Path) -> None:
    with shard_processes(tmp_path, [SGD1], n=2) as shards, shards.client() as c:
        with pytest.raises(NotFound, match="init_dense"):
            c.pull_dense("w")
        c.init_dense("w", np.zeros((2, 3), np.float32))
        c.wait(c.push_dense("w", np.ones((2, 3), np.float32)))
        value = c.wait(c.pull_dense("w"))
        assert value.shape == (2, 3) and np.all(value < 0), "adam (the default) moved every weight down"
