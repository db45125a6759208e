"""The changed-keys log of a sparse table: which ids a push changed, in order, for readers
that follow the table live (the service refreshing item vectors between bundles).

A ring of the last ``capacity`` changed keys with the time the records behind the change
were received (the batch's newest Kafka time, sent with the push; the push's wall time when
the pusher sent none), addressed by a running sequence number. It costs nothing until someone reads it:
``record`` is a no-op while the log is inactive, and the first ``read`` activates it (the
ring is allocated then). Pushes afterwards append their deduplicated keys (two array copies
under the table's lock, small beside the optimizer update).

A reader keeps ``(generation, seq)``. ``read`` answers the keys after ``seq``; ``reset`` in
the answer says the reader lost track and must start over: the ring wrapped past its cursor,
or the table was replaced (a load: restore, rollback, restart), which also starts a new
*generation* (random, so a restarted shard's log never continues an old cursor by accident).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import numpy as np

DEFAULT_CAPACITY = 1 << 20  # keys: 16 MiB of ring once active


def _new_generation() -> int:
    return int.from_bytes(os.urandom(6), "little") or 1  # 48 bits: exact in JSON and float64


@dataclass(frozen=True)
class Changes:
    """Keys changed after the reader's cursor (repeats possible), the push times, and the new cursor."""

    keys: np.ndarray  # uint64
    times: np.ndarray  # float64 receipt time of the records that changed each key (else the push time)
    generation: int
    seq: int  # the cursor to read from next
    reset: bool  # the reader's cursor was lost (wrapped or another generation): changes may be missing


class ChangeLog:
    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self.capacity = capacity
        self.generation = _new_generation()
        self.seq = 0
        self._keys: np.ndarray | None = None  # allocated by the first read
        self._times: np.ndarray | None = None

    @property
    def active(self) -> bool:
        return self._keys is not None

    def record(self, keys: np.ndarray, now: float | None = None) -> None:
        """Append ``keys`` (called under the table's lock by every push)."""
        if self._keys is None or keys.shape[0] == 0:
            return
        assert self._times is not None
        t = time.time() if now is None else now
        cap = self.capacity
        if keys.shape[0] > cap:  # only the newest fit; the skipped ones still count in seq
            self.seq += keys.shape[0] - cap
            keys = keys[-cap:]
        m = keys.shape[0]
        start = self.seq % cap
        first = min(m, cap - start)
        self._keys[start : start + first] = keys[:first]
        self._times[start : start + first] = t
        if first < m:
            self._keys[: m - first] = keys[first:]
            self._times[: m - first] = t
        self.seq += m

    def restart(self) -> None:
        """The table's rows were replaced: readers start over in a new generation."""
        self.generation = _new_generation()
        self.seq = 0

    def read(self, generation: int, since: int, limit: int) -> Changes:
        """Up to ``limit`` keys after ``since`` in ``generation``; activates the log."""
        if self._keys is None:
            self._keys = np.empty(self.capacity, np.uint64)
            self._times = np.empty(self.capacity, np.float64)
            return Changes(np.empty(0, np.uint64), np.empty(0), self.generation, self.seq, reset=True)
        assert self._times is not None
        lost = generation != self.generation or since > self.seq or since < self.seq - self.capacity
        start = max(self.seq - self.capacity, 0) if lost else since
        end = min(self.seq, start + max(limit, 0))
        idx = np.arange(start, end, dtype=np.int64) % self.capacity
        return Changes(self._keys[idx], self._times[idx], self.generation, end, reset=lost)
