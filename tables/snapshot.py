"""Consistent base snapshots by row-granular copy-on-write.

A base save must see the table as of one instant without stalling pushes for the whole
copy. At the save point the snapshot records the row count ``n0``; a writer then copies
rows ``[0, n0)`` out in chunks, taking the table lock once per chunk. Before any push
changes a row that the writer has not copied yet, the push first saves that row's
pre-image (``protect``); the writer uses the pre-image instead of the live row. So a push
pays only for the rows it touches, and the stall it can see is one chunk copy.
Rows appended after the save point (>= n0) are not part of the snapshot. Eviction, pass
loads and other whole-table rewrites wait until the snapshot is done.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from tables.hashmap import JIT
from tables.rows import RowStore


@njit(**JIT)
def _claim(rows: np.ndarray, written: int, n0: int, pre_pos: np.ndarray, n_pre: int, out: np.ndarray) -> int:
    """Rows that need a pre-image now; ``pre_pos`` holds position + 1 (0 = none yet)."""
    cnt = 0
    for i in range(rows.shape[0]):
        r = rows[i]
        if written <= r < n0 and pre_pos[r] == 0:
            pre_pos[r] = n_pre + cnt + 1
            out[cnt] = r
            cnt += 1
    return cnt


class BaseSnapshot:
    """Copy-on-write view of rows ``[0, n0)`` at the save point."""

    def __init__(self, store: RowStore, chunk_rows: int) -> None:
        self.n0 = store.n
        self.chunk_rows = chunk_rows
        self.written = 0
        self._pre_pos = np.zeros(self.n0, np.int64)  # calloc'd: pages appear only where written
        # Lazily faulted: memory grows only with the rows pushed during the save.
        self._pre = {name: np.empty((self.n0, *c.shape[1:]), c.dtype) for name, c in store.cols.items()}
        self._n_pre = 0

    def protect(self, store: RowStore, rows: np.ndarray) -> None:
        """Call under the table lock before changing ``rows``."""
        out = np.empty(rows.shape[0], np.int64)
        cnt = _claim(rows, self.written, self.n0, self._pre_pos, self._n_pre, out)
        if cnt:
            sel = out[:cnt]
            for name, col in store.cols.items():
                self._pre[name][self._n_pre : self._n_pre + cnt] = col[sel]
            self._n_pre += cnt

    @property
    def done(self) -> bool:
        return self.written >= self.n0

    def next_chunk(self, store: RowStore) -> dict[str, np.ndarray]:
        """Call under the table lock: the next chunk of snapshot rows, pre-images applied."""
        a = self.written
        b = min(a + self.chunk_rows, self.n0)
        out = {name: col[a:b].copy() for name, col in store.cols.items()}
        pos = self._pre_pos[a:b]
        hit = pos > 0
        if hit.any():
            src = pos[hit] - 1
            for name in out:
                out[name][hit] = self._pre[name][src]
        self.written = b
        return out
