"""The shard side of sync mode: gradients held per step, and the barrier that applies them.

Pushes flagged SYNC are held, not applied. When the last of ``workers`` workers reaches a
step's barrier, the held gradients are applied as one push per table (the table sums
duplicate keys and runs one optimizer update), so N workers equal one process training on
the concatenated batch.

A barrier is polled, never held open: every BARRIER request is answered at once, "waiting"
(with who is missing and how long each was silent) or complete, so no request outlives the
client's timeout however long the slowest peer takes, and a shard that does not answer is
gone, not busy. A worker is named by the id it sends (its rank), not by its socket, so a
poll after a reconnect is the same arrival. Each poll refreshes its sender's last contact;
the client gives up only on a missing peer silent for longer than its peer timeout
(:meth:`ps.client.PSClient.barrier`). The outcome of a released step waits for each of its
workers to collect it; a worker arriving again at that step number after collecting it
starts a new round (pass barriers reuse their numbers).

Geo mode pushes row deltas instead of gradients; a shard adds them by running them, negated,
through its optimizer, which is a plain sum only for :func:`adds_geo_deltas` optimizers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from core.errors import Conflict, InvalidInput, StreamrecError
from tables.table_config import OptimizerConfig


def adds_geo_deltas(optimizer: OptimizerConfig) -> bool:
    """True when pushing ``-delta`` through ``optimizer`` adds ``delta`` exactly: sgd at lr 1, no l2, no clip."""
    return optimizer.kind == "sgd" and optimizer.lr == 1.0 and not optimizer.l2 and not optimizer.grad_clip


KEPT_OUTCOMES = 256  # released steps whose outcome not every worker collected yet (a dead one never does)


@dataclass
class _Step:
    workers: int
    started: float
    arrived: dict[str, float] = field(default_factory=dict)  # worker id -> its last poll


@dataclass
class _Outcome:
    uncollected: set[str]
    error: StreamrecError | None
    applied: int


@dataclass
class BarrierPoll:
    """A poll's answer: ``release`` when this poll completed the step (the caller applies the
    held gradients and calls :meth:`SyncSteps.released`); ``meta`` the reply's meta otherwise."""

    complete: bool
    release: bool = False
    error: StreamrecError | None = None
    meta: dict[str, Any] = field(default_factory=dict)


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
        self._done: dict[int, _Outcome] = {}  # released steps, oldest first
        self._seen: dict[str, float] = {}  # worker id -> its last poll of any step
        self._releasing: tuple[int, set[str]] = (0, set())

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

    def arrive(self, step: int, workers: int, worker: str, now: float) -> BarrierPoll:
        """Worker ``worker`` polls the barrier of ``step`` (see the module docstring)."""
        if workers < 1:
            raise InvalidInput(f"barrier: workers must be >= 1, got {workers}")
        self._seen[worker] = now
        done = self._done.get(step)
        if done is not None and worker in done.uncollected:
            done.uncollected.discard(worker)
            if not done.uncollected:
                del self._done[step]
            return BarrierPoll(True, error=done.error, meta={"step": step, "applied": done.applied})
        entry = self._steps.setdefault(step, _Step(workers, now))
        if entry.workers != workers:
            raise Conflict(f"barrier step {step}: workers disagree ({entry.workers} vs {workers})")
        entry.arrived[worker] = now
        if len(entry.arrived) < workers:
            return BarrierPoll(False, meta={"step": step, "waiting": True, **self._missing(entry, now)})
        del self._steps[step]
        self._releasing = (step, set(entry.arrived) - {worker})
        return BarrierPoll(True, release=True)

    def released(self, error: StreamrecError | None, applied: int) -> None:
        """The step :meth:`arrive` said to release was applied: its other workers collect this outcome."""
        step, others = self._releasing
        if others:
            self._done[step] = _Outcome(others, error, applied)
            while len(self._done) > KEPT_OUTCOMES:
                self._done.pop(next(iter(self._done)))

    def _missing(self, entry: _Step, now: float) -> dict[str, Any]:
        """Who has not arrived and for how long each was silent (ranks ``0..workers-1`` when the
        ids are ranks; else only how long since the latest arrival)."""
        latest = max(entry.arrived.values())
        out: dict[str, Any] = {"arrived": len(entry.arrived), "quiet_s": now - latest}
        if all(w.isdigit() for w in entry.arrived):
            out["missing"] = [[r, now - self._seen.get(str(r), entry.started)]
                              for r in range(entry.workers) if str(r) not in entry.arrived]
        return out

    def release(self) -> HeldGradients:
        """Everything held so far, merged per table; the holdings start empty again."""
        sparse = {}
        for name, parts in self._sparse.items():
            keys, grads, shows, clicks = (np.concatenate(col) for col in zip(*parts, strict=True))
            sparse[name] = (keys, grads, shows, clicks)
        held = HeldGradients(sparse, self._dense, self._pushes)
        self._sparse, self._dense, self._pushes = {}, {}, 0
        return held
