"""A trainer stand-in run as a real process by the PS tests: ``worker_process.py SCENARIO ...``.

It finds the shards through STREAMREC_* (ps.cluster) like any trainer.
"""

from __future__ import annotations

import contextlib
import sys
import time

import numpy as np

from core.errors import ShardRestarted
from ps.admin import SaveMode
from ps.cluster import cluster_from_env
from tables.table_config import OptimizerConfig
from trainer.ps_worker import PSWorker


def async_batches(rank: int, steps: int, keys: int, batch: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Known integer gradients (exact in float32 sums) with duplicate keys inside batches."""
    rng = np.random.default_rng(1000 + rank)
    out = []
    for _ in range(steps):
        k = rng.integers(0, keys, batch).astype(np.uint64)
        g = rng.integers(-3, 4, (batch, 4)).astype(np.float32)
        out.append((k, g))
    return out


def sync_batches(rank: int, steps: int, keys: int, batch: int) -> list[np.ndarray]:
    rng = np.random.default_rng(2000 + rank)
    return [rng.integers(0, keys, batch).astype(np.uint64) for _ in range(steps)]


ADAM = OptimizerConfig(kind="adam", lr=0.01)


def dense_grad(rank: int, step: int) -> np.ndarray:
    """A worker's gradient of the Adam-run dense array at a step of the sync test."""
    return np.random.default_rng(3000 + 100 * rank + step).normal(size=50).astype(np.float32)


def target(keys: np.ndarray, width: int) -> np.ndarray:
    """Regression target of the sync test: the gradient of 0.5 * ||w - target||^2 is w - target."""
    return ((keys[:, None] % 7).astype(np.float32) - 3.0) * np.arange(1, width + 1, dtype=np.float32) / 8


def main(argv: list[str]) -> int:
    scenario, steps, keys, batch = argv[0], int(argv[1]), int(argv[2]), int(argv[3])
    spec = cluster_from_env()
    worker = PSWorker.from_spec(spec, geo_lr=1.0)
    if scenario == "async":
        for k, g in async_batches(spec.rank, steps, keys, batch):
            worker.push("sgd1", k, g)
            worker.step()
    elif scenario == "sync":
        worker.init_dense("bias", np.zeros(8, np.float32), optimizer=OptimizerConfig(kind="sgd", lr=1.0))
        worker.init_dense("adam", np.ones(50, np.float32), optimizer=ADAM)
        for step, k in enumerate(sync_batches(spec.rank, steps, keys, batch)):
            w = worker.pull("ada", k)
            worker.push("ada", k, w - target(k, w.shape[1]))
            worker.push_dense("bias", np.full(8, spec.rank + 1, np.float32))
            worker.push_dense("adam", dense_grad(spec.rank, step))
            worker.step()
            # every worker sees the same dense value after each barrier: the sum of the step applied once
            step_sum = sum(r + 1 for r in range(spec.num_workers))
            assert (worker.pull_dense("bias") == -step_sum * worker.steps).all(), worker.pull_dense("bias")
    elif scenario == "geo":
        for k, g in async_batches(spec.rank, steps, keys, batch):
            worker.pull("sgd1", k)
            worker.push("sgd1", k, g)
            worker.step()
    elif scenario == "steady":
        # every step adds 1 to every row and is saved; progress is reported after each save
        progress, result = argv[4], argv[5]
        k = np.arange(keys, dtype=np.uint64)
        for step in range(steps):
            # a shard restarted: its rows came back from the last save. ShardRestarted comes after
            # every reply of the call arrived, so the call was done; this stand-in goes on (a
            # trainer regroups from its last committed pass instead)
            with contextlib.suppress(ShardRestarted):
                worker.push("sgd1", k, -np.ones((keys, 4), np.float32))
            with contextlib.suppress(ShardRestarted):
                worker.client.admin.save(mode=SaveMode.DELTA)
            with open(progress, "a") as f:
                f.write(f"{step + 1}\n")
            time.sleep(0.05)
        np.save(result, worker.pull("sgd1", k))
    elif scenario == "fail":
        raise SystemExit(3 if spec.rank == int(argv[4]) else 0)
    else:
        raise SystemExit(f"unknown scenario {scenario}")
    worker.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
