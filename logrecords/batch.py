"""The columnar micro-batch every parser produces and the trainer consumes (the MultiSlot shape).

Per sparse slot the ids of all records sit in one ``values`` array; record ``i`` owns
``values[offsets[i]:offsets[i + 1]]`` (zero ids is allowed). ``positions`` names the source
span of the batch: for each partition the first and last offset it covers, rejected
records included, which is all the offset tracker needs (records of a partition arrive in order).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

Ragged = tuple[np.ndarray, np.ndarray]  # (values uint64[nnz], offsets int64[n + 1])


@dataclass(frozen=True)
class Batch:
    """One micro-batch of parsed records.

    labels:     float32[n]
    dense:      float32[n, n_dense] (a missing dense value is 0)
    slots:      slot name -> (values uint64[nnz], offsets int64[n + 1])
    event_time: float64[n] seconds since the epoch, or None when the schema has none (NaN = absent)
    user_id:    uint64[n] id of the schema's user slot (0 = absent), or None
    item_id:    uint64[n] id of the schema's item slot (0 = absent), or None
    positions:  partition -> (first offset, last offset) covered, or {} for file data
    received_at: the newest Kafka timestamp of the batch's records (seconds since the epoch: when
                the system received them, a replayed log's too), or None for file data
    absent:     bool[n, k]: record i lacks field ``schema.presence_fields[j]`` (key absent or null), or
                None where the format cannot tell (Criteo and CSV read an empty value as the value)
    """

    labels: np.ndarray
    dense: np.ndarray
    slots: dict[str, Ragged]
    event_time: np.ndarray | None = None
    user_id: np.ndarray | None = None
    item_id: np.ndarray | None = None
    positions: dict[int, tuple[int, int]] = field(default_factory=dict)
    received_at: float | None = None
    absent: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    def slot_ids(self, name: str, row: int) -> np.ndarray:
        """The ids record ``row`` holds in slot ``name``."""
        values, offsets = self.slots[name]
        return values[offsets[row] : offsets[row + 1]]

    def take(self, rows: np.ndarray) -> Batch:
        """A new batch of the given rows, in that order (positions are kept: same source span)."""
        rows = np.asarray(rows, dtype=np.int64)
        return Batch(
            labels=self.labels[rows],
            dense=self.dense[rows],
            slots={name: take_ragged(v, o, rows) for name, (v, o) in self.slots.items()},
            event_time=None if self.event_time is None else self.event_time[rows],
            user_id=None if self.user_id is None else self.user_id[rows],
            item_id=None if self.item_id is None else self.item_id[rows],
            positions=dict(self.positions),
            received_at=self.received_at,
            absent=None if self.absent is None else self.absent[rows],
        )


def take_ragged(values: np.ndarray, offsets: np.ndarray, rows: np.ndarray) -> Ragged:
    """Gather rows of a ragged array without a Python loop."""
    lengths = offsets[rows + 1] - offsets[rows]
    new_offsets = np.zeros(rows.shape[0] + 1, dtype=np.int64)
    np.cumsum(lengths, out=new_offsets[1:])
    # Index of every kept value: the row's start plus the position inside the row.
    starts = np.repeat(offsets[rows] - new_offsets[:-1], lengths)
    idx = starts + np.arange(int(new_offsets[-1]), dtype=np.int64)
    return values[idx], new_offsets


def concat_batches(batches: list[Batch]) -> Batch:
    """Join batches end to end; positions are merged to the widest span per partition."""
    if not batches:
        raise ValueError("concat_batches needs at least one batch")
    first = batches[0]
    slots: dict[str, Ragged] = {}
    for name in first.slots:
        vals = [b.slots[name][0] for b in batches]
        offs = [b.slots[name][1] for b in batches]
        base = np.cumsum([0] + [int(o[-1]) for o in offs[:-1]])
        slots[name] = (
            np.concatenate(vals),
            np.concatenate([offs[0][:1]] + [o[1:] + b for o, b in zip(offs, base, strict=True)]),
        )
    positions: dict[int, tuple[int, int]] = {}
    for b in batches:
        for p, (lo, hi) in b.positions.items():
            old = positions.get(p)
            positions[p] = (lo, hi) if old is None else (min(old[0], lo), max(old[1], hi))

    def opt(name: str) -> np.ndarray | None:
        parts = [getattr(b, name) for b in batches]
        return None if parts[0] is None else np.concatenate(parts)

    return Batch(
        labels=np.concatenate([b.labels for b in batches]),
        dense=np.concatenate([b.dense for b in batches]),
        slots=slots,
        event_time=opt("event_time"),
        user_id=opt("user_id"),
        item_id=opt("item_id"),
        positions=positions,
        received_at=max((b.received_at for b in batches if b.received_at is not None), default=None),
        # a batch of another parser (the reference path's empty one included) may not report absence
        absent=None if any(b.absent is None for b in batches) else np.concatenate([b.absent for b in batches]),
    )
