"""Where a worker's parameters live: in-process tables, or the parameter server.

Both stores expose the same verbs, so the step does not care: ``pull_sparse``/``push_sparse``
per table (keys unique per call, gradients with show/click counts), ``pull_dense``/
``push_dense`` of the model's one flat dense vector, and ``end_step`` (the sync barrier or
the geo flush on the PS; nothing locally). The dense vector is the PS dense array
``dense``; its optimizer is the model's dense optimizer, applied on the shards.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from tables.config import DenseTableConfig, OptimizerConfig, TableConfig
from tables.dense_table import DenseTable
from tables.sparse_table import SparseTable
from tables.sync_modes import PSWorker

DENSE_NAME = "dense"


class ParamStore(Protocol):
    def pull_sparse(self, table: str, keys: np.ndarray) -> np.ndarray: ...
    def push_sparse(self, table: str, keys: np.ndarray, grads: np.ndarray, shows: np.ndarray,
                    clicks: np.ndarray) -> None: ...
    def pull_dense(self) -> np.ndarray: ...
    def push_dense(self, grad: np.ndarray) -> None: ...
    def end_step(self) -> None: ...


class LocalStore:
    """Tables in this process (single-process training, tests, infer mode on saved tables)."""

    def __init__(self, tables: tuple[TableConfig, ...], dense_initial: np.ndarray,
                 dense_optimizer: OptimizerConfig) -> None:
        self.sparse = {t.name: SparseTable(t) for t in tables}
        self.dense = DenseTable(DenseTableConfig(name=DENSE_NAME, optimizer=dense_optimizer),
                                initial=np.ascontiguousarray(dense_initial, np.float32))

    def pull_sparse(self, table: str, keys: np.ndarray) -> np.ndarray:
        return self.sparse[table].pull(keys)

    def push_sparse(self, table: str, keys: np.ndarray, grads: np.ndarray, shows: np.ndarray,
                    clicks: np.ndarray) -> None:
        self.sparse[table].push(keys, grads, shows, clicks)

    def pull_dense(self) -> np.ndarray:
        return self.dense.pull()

    def push_dense(self, grad: np.ndarray) -> None:
        self.dense.push(grad)

    def end_step(self) -> None:
        pass


class PSStore:
    """The sharded parameter server through a PSWorker (async, sync or geo)."""

    def __init__(self, worker: PSWorker, dense_initial: np.ndarray, dense_optimizer: OptimizerConfig) -> None:
        self.worker = worker
        # first writer wins: every worker offers the same seeded initial value
        worker.init_dense(DENSE_NAME, np.ascontiguousarray(dense_initial, np.float32), optimizer=dense_optimizer)

    def pull_sparse(self, table: str, keys: np.ndarray) -> np.ndarray:
        return self.worker.pull(table, keys)

    def push_sparse(self, table: str, keys: np.ndarray, grads: np.ndarray, shows: np.ndarray,
                    clicks: np.ndarray) -> None:
        self.worker.push(table, keys, grads, shows=shows, clicks=clicks)

    def pull_dense(self) -> np.ndarray:
        return self.worker.pull_dense(DENSE_NAME)

    def push_dense(self, grad: np.ndarray) -> None:
        self.worker.push_dense(DENSE_NAME, grad)

    def end_step(self) -> None:
        self.worker.step()
