"""What a sparse table holds between calls, in one public shape.

:class:`TableState` is the row store and the hash index over it (with the index's secret
hash key, :func:`tables.hashmap.new_hash_key`), the admission policy
(with its pending counts), the pass and save epoch, each save cursor's last save, and the
tombstones of evicted ids that some cursor's next delta still owes. The table
(:mod:`tables.sparse_table`) changes it under its lock; the table files
(:mod:`tables.table_files`) write it and rebuild it. Every method here keeps the index
pointing at exactly rows ``0..rows.n-1``; callers hold the table lock.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tables import hashmap
from tables.admission import Admission
from tables.row_kernels import move_rows
from tables.rows import RowStore, column_words


@dataclass
class Cursor:
    """Where a chain of saves (checkpoints, exports) stands: its last save's epoch and id."""

    epoch: int
    save_id: str


def _no_keys() -> np.ndarray:
    return np.empty(0, np.uint64)


def _no_epochs() -> np.ndarray:
    return np.empty(0, np.uint32)


@dataclass
class TableState:
    rows: RowStore
    slots: np.ndarray  # the hash index (tables.hashmap) over rows.cols["keys"][:rows.n]
    hash_key: np.ndarray = field(repr=False)  # the index's secret slot-hash key (2 x uint64): saved, never shown
    admission: Admission
    pass_id: int = 0  # passes closed by end_pass
    epoch: int = 1  # save epoch: rows changed now get it; each save takes it and starts the next
    cursors: dict[str, Cursor] = field(default_factory=dict)
    tomb_keys: np.ndarray = field(default_factory=_no_keys)  # evicted ids a delta still owes ...
    tomb_epochs: np.ndarray = field(default_factory=_no_epochs)  # ... and the epoch of each eviction

    @classmethod
    def empty(cls, widths: dict[str, int], capacity: int, admission: Admission) -> TableState:
        """No rows yet, room for ``capacity`` before the store or the index grows; a fresh
        secret hash key."""
        return cls(RowStore(widths, capacity), np.zeros(hashmap.slots_for(capacity), np.uint64),
                   hashmap.new_hash_key(), admission)

    @classmethod
    def indexed(cls, rows: RowStore, hash_key: np.ndarray, admission: Admission, capacity: int) -> TableState:
        """Around rows already filled (a loaded base): index them under ``hash_key``, with
        room for ``capacity``."""
        slots = np.zeros(hashmap.slots_for(max(rows.n, capacity)), np.uint64)
        hashmap.rebuild(slots, rows.cols["keys"], hash_key, rows.n)
        return cls(rows, slots, hash_key, admission)

    def lookup(self, keys: np.ndarray) -> np.ndarray:
        """Row of each id (-1 when absent)."""
        rows = np.empty(keys.shape[0], np.int64)
        hashmap.lookup(self.slots, self.rows.cols["keys"], self.hash_key, keys, rows)
        return rows

    def reserve(self, n_rows: int, limit: int | None = None) -> None:
        """Room for ``n_rows`` rows in the store (growth capped at ``limit`` rows), and in the
        index under its load factor."""
        self.rows.reserve(n_rows, limit)
        if n_rows > self.slots.shape[0] * hashmap.MAX_LOAD:
            slots = np.zeros(hashmap.slots_for(n_rows), np.uint64)
            hashmap.rebuild(slots, self.rows.cols["keys"], self.hash_key, self.rows.n)
            self.slots = slots

    def compact(self, capacity: int) -> None:
        """Shrink the store to ``capacity`` rows (at least ``n``) and the index to what that
        needs, when it is bigger: a lowered byte budget frees its memory."""
        self.rows.resize(max(capacity, self.rows.n))
        want = hashmap.slots_for(self.rows.capacity)
        if want < self.slots.shape[0]:
            slots = np.zeros(want, np.uint64)
            hashmap.rebuild(slots, self.rows.cols["keys"], self.hash_key, self.rows.n)
            self.slots = slots

    def remove(self, mask: np.ndarray) -> None:
        """Drop the rows in ``mask`` (over rows 0..n-1), moving the last rows into the holes
        so rows stay dense."""
        n = self.rows.n
        cols = self.rows.cols
        hashmap.delete(self.slots, cols["keys"], self.hash_key, cols["keys"][:n][mask].copy())
        new_n = n - int(mask.sum())
        holes = np.flatnonzero(mask[:new_n])
        srcs = np.flatnonzero(~mask[new_n:n]) + new_n
        move_rows(column_words(cols), holes, srcs)
        hashmap.relink(self.slots, cols["keys"], self.hash_key, srcs, holes)
        self.rows.n = new_n

    def remove_keys(self, keys: np.ndarray) -> None:
        """Drop the rows of those ``keys`` that have one."""
        rows = self.lookup(keys)
        mask = np.zeros(self.rows.n, np.bool_)
        mask[rows[rows >= 0]] = True
        if mask.any():
            self.remove(mask)

    def upsert(self, cols: dict[str, np.ndarray]) -> None:
        """Write whole rows (every column, as a delta holds them): replace the rows of known
        ids, append the others."""
        rows = self.lookup(cols["keys"])
        new = rows < 0
        n0, m = self.rows.n, int(new.sum())
        self.reserve(n0 + m)
        rows[new] = np.arange(n0, n0 + m)
        for name, col in self.rows.cols.items():
            col[rows] = cols[name]
        self.rows.n = n0 + m
        hashmap.insert(self.slots, self.rows.cols["keys"], self.hash_key, rows[new])

    def add_tombstones(self, keys: np.ndarray, epochs: np.ndarray) -> None:
        self.tomb_keys = np.concatenate([self.tomb_keys, keys])
        self.tomb_epochs = np.concatenate([self.tomb_epochs, epochs])

    def tombstones_after(self, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        """Ids evicted after save epoch ``epoch`` and their epochs (copies)."""
        after = self.tomb_epochs > epoch
        return self.tomb_keys[after], self.tomb_epochs[after]

    def prune_tombstones(self) -> None:
        """Drop the tombstones every cursor's last save already covers."""
        self.tomb_keys, self.tomb_epochs = self.tombstones_after(min(c.epoch for c in self.cursors.values()))
