"""Sampled staleness of the sparse rows: how many updates a row took between a worker's pull of
it and that worker's push of its gradient.

Off by default (``PSConfig.staleness_sample`` 0): the shard then holds no sampler and its pull
and push paths test one ``None``. On, the shard follows the keys with ``key % every == 0``: per
key the updates applied so far, and per (worker tag, table, key) the counts seen at that worker's
pulls, oldest first. A worker pulls a row, possibly again for later batches (its prefetch runs
ahead), then pushes in the same order, so each push pairs with its worker's oldest open pull of
that key. Workers name themselves by a tag on their requests (:attr:`ps.client.PSClient.tag`):
a worker's prefetch stage pulls on a connection of its own, so the socket cannot tell.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np

MAX_STALENESS = 4096  # larger values are counted in the last bin


class StalenessSample:
    def __init__(self, every: int) -> None:
        if every < 1:
            raise ValueError(f"staleness sampling needs every >= 1, got {every}")
        self.every = np.uint64(every)
        self._updates: dict[tuple[str, int], int] = {}
        self._open: dict[tuple[str, str, int], deque[int]] = {}
        self.counts = np.zeros(MAX_STALENESS + 1, np.int64)
        self.unpaired = 0  # pushes of a sampled key without an open pull by the same worker

    def _sampled(self, keys: np.ndarray) -> list[int]:
        return keys[keys % self.every == 0].tolist()

    def pulled(self, tag: Any, table: str, keys: np.ndarray) -> None:
        if tag is None:
            return
        for key in self._sampled(keys):
            self._open.setdefault((str(tag), table, key), deque()).append(self._updates.get((table, key), 0))

    def pushed(self, tag: Any, table: str, keys: np.ndarray) -> None:
        """Before the push is applied: each sampled key's staleness, then its update."""
        for key in self._sampled(keys):
            done = self._updates.get((table, key), 0)
            seen = None if tag is None else self._open.get((str(tag), table, key))
            if seen:
                self.counts[min(done - seen.popleft(), MAX_STALENESS)] += 1
            else:
                self.unpaired += 1
            self._updates[(table, key)] = done + 1

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
