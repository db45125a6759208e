"""Sampled staleness of the sparse rows: how many updates a row took between a worker's pull of
it and that worker's push of its gradient.

Off by default (``PSConfig.staleness_sample`` 0): the shard then holds no sampler and its pull
and push paths test one ``None``. On, the shard follows the keys with ``key % every == 0``: per
key the updates applied so far, and per (worker tag, table, key) the counts seen at that worker's
pulls, oldest first. A worker pulls a row, possibly again for later batches (its prefetch runs
ahead), then pushes in the same order, so each push pairs with its worker's oldest open pull of
that key. Workers name themselves by a tag on their requests (:attr:`ps.client.PSClient.tag`):
a worker's prefetch stage pulls on a connection of its own, so the socket cannot tell.

What it holds is bounded for the life of a shard: a followed key no pull or push has touched in
the last ``forget_after`` touches of followed keys is forgotten (a push pairing with a pull from
before then counts as unpaired), and a worker keeps at most :data:`MAX_OPEN` open pulls of a key
(one that pulls and never pushes, a worker that died, holds no more).
"""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np

MAX_STALENESS = 4096  # larger values are counted in the last bin
# touches of followed keys after which a key untouched since is forgotten: a shard holds at most twice this
FORGET_AFTER = 1 << 16
MAX_OPEN = 64  # open pulls of one key by one worker: far above a prefetch's depth


class _Followed:
    """One followed key: the updates applied so far, when it was last touched, each worker's open pulls."""

    __slots__ = ("open", "touched", "updates")

    def __init__(self) -> None:
        self.updates = 0
        self.touched = 0
        self.open: dict[str, deque[int]] = {}


class StalenessSample:
    def __init__(self, every: int, *, forget_after: int = FORGET_AFTER) -> None:
        if every < 1:
            raise ValueError(f"staleness sampling needs every >= 1, got {every}")
        self.every = np.uint64(every)
        self.forget_after = forget_after
        self._keys: dict[tuple[str, int], _Followed] = {}
        self._clock = 0  # touches of followed keys so far
        self._swept = 0  # the clock at the last sweep
        self.counts = np.zeros(MAX_STALENESS + 1, np.int64)
        self.unpaired = 0  # pushes of a sampled key without an open pull by the same worker

    @property
    def followed(self) -> int:
        """Keys held now."""
        return len(self._keys)

    def _touched(self, table: str, keys: np.ndarray) -> list[_Followed]:
        """The followed ones of ``keys``, each stamped with the clock."""
        out = []
        for key in keys[keys % self.every == 0].tolist():
            followed = self._keys.get((table, key))
            if followed is None:
                followed = self._keys[(table, key)] = _Followed()
            followed.touched = self._clock
            self._clock += 1
            out.append(followed)
        return out

    def _sweep(self) -> None:
        """Forget the keys untouched in the last ``forget_after`` touches, once per that many."""
        if self._clock - self._swept < self.forget_after:
            return
        oldest = self._clock - self.forget_after
        self._keys = {k: f for k, f in self._keys.items() if f.touched >= oldest}
        self._swept = self._clock

    def pulled(self, tag: Any, table: str, keys: np.ndarray) -> None:
        if tag is None:
            return
        worker = str(tag)
        for followed in self._touched(table, keys):
            followed.open.setdefault(worker, deque(maxlen=MAX_OPEN)).append(followed.updates)
        self._sweep()

    def pushed(self, tag: Any, table: str, keys: np.ndarray) -> None:
        """Before the push is applied: each sampled key's staleness, then its update."""
        worker = None if tag is None else str(tag)
        for followed in self._touched(table, keys):
            seen = None if worker is None else followed.open.get(worker)
            if seen:
                self.counts[min(followed.updates - seen.popleft(), MAX_STALENESS)] += 1
            else:
                self.unpaired += 1
            followed.updates += 1
        self._sweep()

    def state(self) -> dict[str, Any]:
        """The histogram as {staleness: pushes} (its non-zero bins) and the unpaired pushes: what a shard reports."""
        seen = np.flatnonzero(self.counts)
        return {"counts": dict(zip(seen.tolist(), self.counts[seen].tolist(), strict=True)), "unpaired": self.unpaired}


def summarize(states: list[dict[str, Any]]) -> dict[str, Any]:
    """p50/p99/max/mean over the shards' :meth:`StalenessSample.state` (keys may be strings: JSON)."""
    counts = np.zeros(MAX_STALENESS + 1, np.int64)
    for state in states:
        for value, n in state["counts"].items():
            counts[int(value)] += n
    unpaired = sum(int(s["unpaired"]) for s in states)
    n = int(counts.sum())
    if n == 0:
        return {"pushes": 0, "unpaired": unpaired, "p50": None, "p99": None, "max": None, "mean": None}
    cum = np.cumsum(counts)
    values = np.arange(counts.shape[0])
    return {"pushes": n, "unpaired": unpaired, "p50": int(np.searchsorted(cum, 0.5 * n)),
            "p99": int(np.searchsorted(cum, 0.99 * n)), "max": int(values[counts > 0][-1]),
            "mean": round(float(values @ counts) / n, 3)}
