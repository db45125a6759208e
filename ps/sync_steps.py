"""The shard side of sync mode: gradients held per step, and the barrier that applies them.

Pushes flagged SYNC are held, not applied. When the last of ``workers`` workers reaches a
step's barrier, the held gradients are applied as one push per table (the table sums
duplicate keys and runs one optimizer update), so N workers equal one process training on
the concatenated batch. A worker that resends its barrier (after a client timeout) replaces
its earlier entry instead of counting twice.

Geo mode pushes row deltas instead of gradients; a shard adds them by running them, negated,
through its optimizer, which is a plain sum only for :func:`adds_geo_deltas` optimizers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from core.errors import Conflict, InvalidInput
from tables.table_config import OptimizerConfig


def adds_geo_deltas(optimizer: OptimizerConfig) -> bool:
    """True when pushing ``-delta`` through ``optimizer`` adds ``delta`` exactly: sgd at lr 1, no l2, no clip."""
    return optimizer.kind == "sgd" and optimizer.lr == 1.0 and not optimizer.l2 and not optimizer.grad_clip


Waiter = tuple[bytes, int]  # (client identity, request id) to answer when the barrier opens


@dataclass
class _Step:
    workers: int
    waiting: list[Waiter] = field(default_factory=list)


@dataclass
class HeldGradients:
    """What a barrier releases: per sparse table (keys, grads, shows, clicks), per dense part its sum."""

    sparse: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]
    dense: dict[str, np.ndarray]
    pushes: int


class SyncSteps:
    def __init__(self) -> None:
        self._sparse: dict[str, list[tuple[np.ndarray, ...]]] = {}
        self._dense: dict[str, np.ndarray] = {}
        self._pushes = 0
        self._steps: dict[int, _Step] = {}

    def hold_sparse(self, table: str, keys: np.ndarray, grads: np.ndarray, shows: np.ndarray | None,
                    clicks: np.ndarray | None) -> None:
        n = keys.shape[0]
        shows = np.ones(n, np.float32) if shows is None else shows  # the table's own defaults
        clicks = np.zeros(n, np.float32) if clicks is None else clicks
        self._sparse.setdefault(table, []).append(tuple(np.array(a) for a in (keys, grads, shows, clicks)))
        self._pushes += 1

    def hold_dense(self, name: str, grad: np.ndarray) -> None:
        held = self._dense.get(name)
        self._dense[name] = grad.copy() if held is None else held + grad
        self._pushes += 1

    def arrive(self, step: int, workers: int, waiter: Waiter) -> list[Waiter] | None:
        """Register ``waiter`` at ``step``; all waiters once the step is complete, else None."""
        if workers < 1:
            raise InvalidInput(f"barrier: workers must be >= 1, got {workers}")
        entry = self._steps.setdefault(step, _Step(workers))
        if entry.workers != workers:
            raise Conflict(f"barrier step {step}: workers disagree ({entry.workers} vs {workers})")
        entry.waiting = [w for w in entry.waiting if w[0] != waiter[0]]
        entry.waiting.append(waiter)
        if len(entry.waiting) < workers:
            return None
        del self._steps[step]
        return entry.waiting

    def release(self) -> HeldGradients:
        """Everything held so far, merged per table; the holdings start empty again."""
        sparse = {}
        for name, parts in self._sparse.items():
            keys, grads, shows, clicks = (np.concatenate(col) for col in zip(*parts, strict=True))
            sparse[name] = (keys, grads, shows, clicks)
        held = HeldGradients(sparse, self._dense, self._pushes)
        self._sparse, self._dense, self._pushes = {}, {}, 0
        return held
