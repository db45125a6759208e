"""Rows changed since the served bundle, held in the service's memory: lookups read them there
instead of a round trip to busy shards (serving p99 while training).

The live thread (:mod:`service.live_items`) calls :meth:`LiveRows.poll` every
``items_interval_s``: for each sparse table of the served bundle it reads every shard's
changed-keys log after its cursor (:mod:`ps.shard_changes`), pulls the changed rows that
exist (existing-only pulls: nothing is created) and upserts them into a per-table overlay
(a numba hash index over key, row and pull-time columns, :mod:`tables.hashmap`). A lookup
(:meth:`merge`) overlays the bundle's rows with these, in memory.

When is the overlay the whole truth? Changes before a table's log was first read, or lost
when a reader fell behind the ring, or made before a shard's tables were loaded from a save
(a new generation) are not in it: the table has a *gap* at that time. A bundle holds every
change pushed before its newest record was received (``newest_record_time``: the record's
push, and the pass's save, came after its receipt). So the overlay answers for a table once
the bundle served *before* the current one has a newest record time past the gap (the older
of the two: a lookup may still hold the previous bundle's rows while a new one swaps in);
until then :meth:`merge` returns None and the caller reads through to the shards. For the
same reason an entry may go once it was pulled before that older bundle's newest record:
both bundles a lookup can hold are at least as new. Clocks of the trainers' Kafka producers
and the service are taken to agree (one machine, or synchronized; a producer clock ahead
would make entries go early).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any

import numpy as np

from core.lag_window import LagWindow
from ps.client import PSClient
from tables import hashmap

FRESHNESS_SAMPLES = 4096  # recent rows whose receipt -> overlay lag the quantiles cover


class RowOverlay:
    """One table's overlay: key -> (row, pull time); upserts by the live thread, reads under the caller's lock."""

    def __init__(self, width: int, capacity: int = 1024) -> None:
        self.width = width
        self.n = 0
        self.hkey = hashmap.new_hash_key()
        self.keys = np.empty(capacity, np.uint64)
        self.rows = np.empty((capacity, width), np.float32)
        self.pulled = np.empty(capacity, np.float64)
        self.slots = np.zeros(hashmap.slots_for(capacity), np.uint64)

    def _grow(self, capacity: int) -> None:
        n = self.n
        keys, rows, pulled = self.keys, self.rows, self.pulled
        self.keys = np.empty(capacity, np.uint64)
        self.rows = np.empty((capacity, self.width), np.float32)
        self.pulled = np.empty(capacity, np.float64)
        self.keys[:n], self.rows[:n], self.pulled[:n] = keys[:n], rows[:n], pulled[:n]
        self.slots = np.zeros(hashmap.slots_for(capacity), np.uint64)
        hashmap.rebuild(self.slots, self.keys, self.hkey, n)

    def find(self, ids: np.ndarray) -> np.ndarray:
        """The overlay row of each id, -1 when absent."""
        out = np.empty(ids.shape[0], np.int64)
        if self.n == 0:
            out.fill(-1)
        else:
            hashmap.lookup(self.slots, self.keys, self.hkey, ids, out)
        return out

    def upsert(self, keys: np.ndarray, rows: np.ndarray, now: float) -> None:
        """``keys`` (unique) now hold ``rows``."""
        at = self.find(keys)
        old = at >= 0
        self.rows[at[old]] = rows[old]
        self.pulled[at[old]] = now
        new = ~old
        m = int(new.sum())
        if m:
            if self.n + m > self.keys.shape[0]:
                self._grow(max(2 * self.keys.shape[0], self.n + m))
            idx = np.arange(self.n, self.n + m, dtype=np.int64)
            self.keys[idx], self.rows[idx], self.pulled[idx] = keys[new], rows[new], now
            self.n += m
            hashmap.insert(self.slots, self.keys, self.hkey, idx)

    def drop_before(self, t: float) -> int:
        """Entries pulled before ``t`` go (the bundles hold them); returns how many."""
        keep = np.flatnonzero(self.pulled[: self.n] >= t)
        gone = self.n - keep.shape[0]
        if gone:
            k = keep.shape[0]
            self.keys[:k], self.rows[:k], self.pulled[:k] = self.keys[keep], self.rows[keep], self.pulled[keep]
            self.n = k
            self.slots.fill(0)
            hashmap.rebuild(self.slots, self.keys, self.hkey, k)
        return gone


class LiveRows:
    """The overlays of every followed table, their log cursors and gaps (module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # lookups (request threads) against upserts and drops (the live thread)
        self._tables: dict[str, RowOverlay] = {}
        self._cursors: dict[str, list[tuple[int, int]]] = {}
        self._gap: dict[str, float] = {}  # the newest time changes of the table may be missing from
        self._bundles: deque[tuple[int, float | None]] = deque(maxlen=2)  # (version, newest record time) served
        self._lags = LagWindow(FRESHNESS_SAMPLES)
        self.rows_pulled = 0
        self.lost = 0

    def _safe(self) -> float | None:
        """The newest record time of the older of the two bundles served last (None: not two yet)."""
        if len(self._bundles) < 2 or any(t is None for _, t in self._bundles):
            return None
        return min(t for _, t in self._bundles if t is not None)

    def bundle_served(self, version: int, newest_record_time: float | None) -> None:
        """The service serves bundle ``version`` now: entries both served bundles hold go."""
        if self._bundles and self._bundles[-1][0] == version:
            return
        self._bundles.append((version, newest_record_time))
        safe = self._safe()
        if safe is not None:
            with self._lock:
                for overlay in self._tables.values():
                    overlay.drop_before(safe)

    def answers(self, table: str) -> bool:
        """The overlay holds every change of ``table`` the served bundles lack."""
        safe = self._safe()
        gap = self._gap.get(table)
        return gap is not None and safe is not None and gap <= safe

    def merge(self, table: str, ids: np.ndarray, found: np.ndarray,
              rows: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """The bundle's ``(found, rows of found ids)`` overlaid with the changed rows, or None
        when the overlay does not answer for ``table`` (read through instead)."""
        if not self.answers(table):
            return None
        with self._lock:
            overlay = self._tables.get(table)
            if overlay is None:  # followed, nothing changed since the bundles
                return found, rows
            at = overlay.find(ids)
            live = at >= 0
            if not live.any():
                return found, rows
            full = np.zeros((ids.shape[0], overlay.width), np.float32)
            full[found] = rows
            full[live] = overlay.rows[at[live]]
        both = found | live
        return both, full[both]

    def poll(self, client: PSClient, tables: list[str], *, limit: int) -> int:
        """Read the tables' logs once and upsert the changed rows; returns the rows upserted."""
        done = 0
        for table in tables:
            cursors = self._cursors.get(table) or [(0, 0)] * client.n_shards
            changes = client.wait(client.changes(table, cursors, limit=limit))
            reset = [c.reset for c in changes]
            if any(reset):  # changes pushed before this reply may be missing (a first read activates the log)
                self._gap[table] = time.time()
                self.lost += sum(r and cursors[i][0] != 0 for i, r in enumerate(reset))
                if any(r and cursors[i][0] not in (0, c.generation) for i, (r, c) in enumerate(zip(reset, changes,
                                                                                                 strict=True))):
                    with self._lock:  # a shard's tables went back to a save: its rows here are no longer its rows
                        self._tables.pop(table, None)
            advanced = [(c.generation, c.seq) for c in changes]
            keys = np.concatenate([c.keys for c in changes])
            times = np.concatenate([c.times for c in changes])
            if not keys.size:
                self._cursors[table] = advanced
                continue
            keys, first = np.unique(keys, return_index=True)
            pushed = times[first]
            rows, found = client.wait(client.pull_existing(table, keys))
            now = time.time()
            with self._lock:
                overlay = self._tables.get(table)
                if overlay is None or overlay.width != rows.shape[1]:
                    overlay = self._tables[table] = RowOverlay(rows.shape[1])
                overlay.upsert(keys[found], rows[found], now)
            # the cursors move once the rows are in: a pull that timed out reads the same changes again
            self._cursors[table] = advanced
            self._lags.add((now - pushed[found]).tolist())
            self.rows_pulled += int(found.sum())
            done += int(found.sum())
        return done

    def clear(self) -> None:
        """Forget everything (the live path stops: rollback or restart); followed again from scratch."""
        with self._lock:
            self._tables.clear()
        self._cursors.clear()
        self._gap.clear()

    def freshness(self, q: float) -> float | None:
        """Quantile ``q`` of receipt -> overlay seconds over the recent changed rows (the log's times)."""
        return self._lags.quantile(q)

    def status(self) -> dict[str, Any]:
        return {"tables_followed": sorted(self._cursors),
                "tables_answered": sorted(t for t in self._cursors if self.answers(t)),
                "rows_held": sum(o.n for o in self._tables.values()), "rows_pulled": self.rows_pulled,
                "lost_reads": self.lost,
                "row_freshness_p50_s": _round(self.freshness(0.5)), "row_freshness_p95_s": _round(self.freshness(0.95))}


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 4)
