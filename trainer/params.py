"""Where a worker's parameters live: in-process tables, or the parameter server.

Both stores expose the same verbs, so the step does not care: ``pull_sparse``/``push_sparse``
per table (keys unique per call, gradients with show/click counts), ``pull_dense`` of the
model's one flat dense vector and ``push_dense`` of a gradient for it (``add_dense`` of a
change when the rule is the sum), and ``end_step`` (the sync barrier or the geo flush on
the PS; nothing locally). The dense vector is the PS dense array ``dense`` and its rule is
the store's ``dense_rule``: a plain sum (SGD at lr 1) when workers run the dense optimizer
and add their changes, else the model's dense optimizer run by the shard on the gradients
(see :mod:`trainer.dense_sync`).
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from core.errors import Conflict
from models.item_frequency import FrequencyEstimate
from ps.client import Ticket
from tables.dense_optimizer import DenseOptimizer
from tables.sparse_table import SparseTable
from tables.table_config import OptimizerConfig, TableConfig
from trainer.job_config import DenseUpdate
from trainer.ps_worker import PSWorker
from trainer.shared_frequency import SharedItemFrequency

DENSE_NAME = "dense"
SUM = OptimizerConfig(kind="sgd", lr=1.0)  # dense_update local: the shard adds what workers send


def dense_rule(update: DenseUpdate, optimizer: OptimizerConfig) -> OptimizerConfig:
    """The rule of the PS dense vector: the model's dense optimizer (ps) or a plain sum (local)."""
    return optimizer if update is DenseUpdate.PS else SUM


class ParamStore(Protocol):
    num_workers: int  # workers sharing this store's parameters (trainer.dense_sync's mean merge)

    def pull_sparse(self, table: str, keys: np.ndarray) -> np.ndarray: ...
    def push_sparse(self, table: str, keys: np.ndarray, grads: np.ndarray, shows: np.ndarray,
                    clicks: np.ndarray) -> None: ...
    def pull_dense(self) -> np.ndarray: ...
    def push_dense(self, grad: np.ndarray, *, lr_scale: float = 1.0) -> None: ...
    def add_dense(self, delta: np.ndarray) -> None: ...
    def shared_frequency(self, alpha: float) -> FrequencyEstimate | None: ...
    def end_step(self) -> None: ...
    def drain(self) -> None: ...


class LocalStore:
    """Tables in this process (single-process training, tests, infer mode on saved tables)."""

    def __init__(self, tables: tuple[TableConfig, ...], dense_initial: np.ndarray, *,
                 dense_rule: OptimizerConfig = SUM) -> None:
        self.sparse = {t.name: SparseTable(t) for t in tables}
        self.num_workers = 1
        self.dense = np.array(dense_initial, np.float32)
        self._rule = DenseOptimizer(dense_rule, self.dense)

    def pull_sparse(self, table: str, keys: np.ndarray) -> np.ndarray:
        return self.sparse[table].pull(keys)

    def push_sparse(self, table: str, keys: np.ndarray, grads: np.ndarray, shows: np.ndarray,
                    clicks: np.ndarray) -> None:
        self.sparse[table].push(keys, grads, shows, clicks)

    def pull_dense(self) -> np.ndarray:
        return self.dense.copy()

    def push_dense(self, grad: np.ndarray, *, lr_scale: float = 1.0) -> None:
        self._rule.step(self.dense, np.ascontiguousarray(grad, np.float32), lr_scale=lr_scale)

    def add_dense(self, delta: np.ndarray) -> None:
        self.push_dense(-delta)

    def shared_frequency(self, alpha: float) -> FrequencyEstimate | None:
        return None  # one process: its worker's own estimate is the job's

    def end_step(self) -> None:
        pass

    def drain(self) -> None:
        pass


class PSStore:
    """The sharded parameter server through a PSWorker (async, sync or geo)."""

    def __init__(self, worker: PSWorker, dense_initial: np.ndarray, *,
                 dense_rule: OptimizerConfig | None = SUM) -> None:
        """``dense_rule``: what the PS dense vector must run (None: whatever it has; infer mode)."""
        self.worker = worker
        self.num_workers = worker.num_workers
        self.dense_rule = dense_rule
        self._initial = np.ascontiguousarray(dense_initial, np.float32).copy()
        # async mode: a step's sparse pushes are waited for at the end of the NEXT step, so
        # the network round trip overlaps compute; drain() waits for all (before a commit)
        self._this_step: list[Ticket] = []
        self._last_step: list[Ticket] = []
        self.init()

    def init(self) -> None:
        """Create the dense array on the shards (first writer wins: all offer the same seeded value)."""
        held = self.worker.init_dense(DENSE_NAME, self._initial, optimizer=self.dense_rule or SUM)
        if self.dense_rule is not None and held is not None and held != self.dense_rule:
            # e.g. a pass of a dense_update: local job restored for a ps one: gradients would be
            # added as changes (or changes run through an optimizer)
            raise Conflict(f"the PS dense vector runs {held.model_dump(exclude_defaults=True)}, this job needs "
                           f"{self.dense_rule.model_dump(exclude_defaults=True)} (dense_update local: a plain sum, "
                           "ps: the model's dense_optimizer); keep the job's dense_update and dense_optimizer, "
                           "or start from a new checkpoint_dir")

    def forget(self) -> None:
        """Drop pushes in flight (their shard restarted; the caller reloads a pass)."""
        self._last_step, self._this_step = [], []

    def pull_sparse(self, table: str, keys: np.ndarray) -> np.ndarray:
        return self.worker.pull(table, keys)

    def push_sparse(self, table: str, keys: np.ndarray, grads: np.ndarray, shows: np.ndarray,
                    clicks: np.ndarray) -> None:
        if self.worker.mode == "async":
            # keys come from a batch's features, deduplicated: neither the client nor the shard dedupes them again
            self._this_step.append(self.worker.client.push(table, keys, grads, shows=shows, clicks=clicks,
                                                           unique=True))
        else:
            self.worker.push(table, keys, grads, shows=shows, clicks=clicks)

    def pull_dense(self) -> np.ndarray:
        return self.worker.pull_dense(DENSE_NAME).reshape(-1)

    def push_dense(self, grad: np.ndarray, *, lr_scale: float = 1.0) -> None:
        """``lr_scale``: the step's multiple of the dense lr where each push is a step of its own (the
        PSWorker sends none in sync mode, whose step applies the workers' mean gradient once)."""
        if self.worker.mode == "async":  # waited for with the step's sparse pushes
            self._this_step.append(self.worker.client.push_dense(DENSE_NAME, grad, lr_scale=lr_scale))
        else:
            self.worker.push_dense(DENSE_NAME, grad, lr_scale=lr_scale)

    def add_dense(self, delta: np.ndarray) -> None:
        self.worker.push_dense(DENSE_NAME, -delta)  # SGD at lr 1: w -= -delta

    def shared_frequency(self, alpha: float) -> FrequencyEstimate | None:
        return SharedItemFrequency(self.worker.client, alpha)

    def end_step(self) -> None:
        for ticket in self._last_step:
            self.worker.client.wait(ticket)
        self._last_step, self._this_step = self._this_step, []
        self.worker.step()

    def drain(self) -> None:
        """Wait until every push sent so far was applied."""
        for ticket in self._last_step + self._this_step:
            self.worker.client.wait(ticket)
        self._last_step, self._this_step = [], []
