"""Which Kafka offsets may be committed.

The offset rule
---------------
An offset becomes committable only after the gradients of every earlier record of its
partition were pushed. Concretely, per partition the tracker holds the spans
``[first, last]`` of the batches it has handed out and not yet seen pushed. The committable
offset of a partition (Kafka's "next offset to read") is the first offset of the oldest span
still pending, or one past the last issued offset when nothing is pending. Batches may be
pushed in any order; a later batch pushed early never moves the commit past an older one
still in flight.

Committed offsets go into the pass checkpoint manifest. A restarted trainer seeks to the
offsets of the last committed pass, so every record is trained at least once, and at most
once more for records after the restore point (those pushed but not yet committed).
Rejected records belong to their batch's span: they become committable with it, after their
dead letters were flushed (the consumer flushes before reporting committable offsets).
"""

from __future__ import annotations

from core.errors import Conflict
from logrecords.batch import Batch


class OffsetTracker:
    """Per-partition bookkeeping of issued and pushed batch spans (see the module docstring)."""

    def __init__(self) -> None:
        self._pending: dict[int, dict[int, int]] = {}  # partition -> {first offset: last offset}
        self._next: dict[int, int] = {}  # partition -> one past the last issued offset

    def start_at(self, offsets: dict[int, int]) -> None:
        """Reading restarts at ``offsets`` (after a seek): earlier spans are forgotten."""
        for p, off in offsets.items():
            self._pending[p] = {}
            self._next[p] = int(off)

    def issued(self, batch: Batch) -> None:
        """Record that ``batch`` was handed to the trainer (its records are now in flight)."""
        for p, (first, last) in batch.positions.items():
            if p in self._next and first < self._next[p]:
                raise Conflict(f"partition {p}: batch starts at {first}, before the next unread offset {self._next[p]}")
            self._pending.setdefault(p, {})[first] = last
            self._next[p] = last + 1

    def mark_pushed(self, batch: Batch) -> None:
        """The gradients of every record of ``batch`` were pushed to the parameter servers."""
        for p, (first, last) in batch.positions.items():
            pending = self._pending.get(p, {})
            if pending.get(first) != last:
                raise Conflict(f"partition {p}: span {first}..{last} is not in flight (pushed twice, or never issued)")
            del pending[first]

    def committable(self) -> dict[int, int]:
        """Per partition, the offset a checkpoint may record as "resume here"."""
        return {p: min(self._pending[p]) if self._pending.get(p) else nxt for p, nxt in self._next.items()}

    def in_flight(self) -> int:
        """Number of (batch, partition) spans issued and not yet pushed."""
        return sum(len(v) for v in self._pending.values())
