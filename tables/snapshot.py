"""Consistent save snapshots by row-granular copy-on-write.

A save must see the table as of one instant without stalling pushes for the whole copy.
At the save point the snapshot records the row count ``n0`` and, for a delta, which of
those rows it holds (those changed since the cursor's last save; a base holds them all);
a writer then copies rows ``[0, n0)`` out in chunks, taking the table lock once per
chunk. Before any push changes a held row that the writer has not copied yet, the push
first saves that row's pre-image (``protect``); the writer uses the pre-image instead of
the live row. So taking the point costs microseconds (a delta: one pass over a column to
pick its rows), a push pays only for the rows it touches, and the stall it can see is
one chunk copy. Rows appended after the save point (>= n0) are not part of the snapshot.
Eviction, pass loads and other whole-table rewrites wait until the snapshot is done.
"""

from __future__ import annotations

import mmap

import numpy as np

from core.kernel_cache import JIT, kernel
from tables.rows import RowStore


@kernel(**JIT)
def _claim(rows: np.ndarray, written: int, n0: int, saved: np.ndarray, out: np.ndarray) -> int:
    """Rows that need a pre-image now (not yet copied by the writer, none saved yet); marks
    them in the ``saved`` bitmap (one bit per row: small enough to stay in cache)."""
    cnt = 0
    for i in range(rows.shape[0]):
        r = rows[i]
        if written <= r < n0:
            byte, bit = r >> 3, np.uint8(1 << (r & 7))
            if not saved[byte] & bit:
                saved[byte] |= bit
                out[cnt] = r
                cnt += 1
    return cnt


def _lazy_empty(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """An array on a plain anonymous mapping, faulted in as it is written. numpy madvises big
    arrays for huge pages, whose first touches can stall in the kernel's synchronous
    compaction (~200 ms measured here); pushes first-touch these buffers, so 4 KiB pages."""
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if nbytes == 0:
        return np.zeros(shape, dtype)
    return np.frombuffer(mmap.mmap(-1, nbytes), dtype).reshape(shape)


class RowSnapshot:
    """Copy-on-write view of rows ``[0, n0)`` at the save point, or of the rows among them
    where ``only`` (a bool mask over them) is set."""

    def __init__(self, store: RowStore, chunk_rows: int, *, only: np.ndarray | None = None) -> None:
        self.n0 = store.n
        self.chunk_rows = chunk_rows
        self.written = 0
        if only is None:
            self._select = None
            self._saved = np.zeros((self.n0 + 7) // 8, np.uint8)
        else:
            self._select = np.flatnonzero(only[: self.n0])
            # rows the snapshot does not hold count as saved already: pushes never copy them
            self._saved = np.packbits(~only[: self.n0], bitorder="little")
        held = self.n0 if self._select is None else self._select.shape[0]
        # Pre-images are appended in push order, so these buffers are written sequentially.
        self._pre = {name: _lazy_empty((held, *c.shape[1:]), c.dtype) for name, c in store.cols.items()}
        self._pre_rows = _lazy_empty((held,), np.dtype(np.int64))
        self._by_chunk: dict[int, list[np.ndarray]] = {}  # chunk -> positions of its pre-images
        self._n_pre = 0

    def protect(self, store: RowStore, rows: np.ndarray) -> None:
        """Call under the table lock before changing ``rows``."""
        out = np.empty(rows.shape[0], np.int64)
        cnt = _claim(rows, self.written, self.n0, self._saved, out)
        if not cnt:
            return
        sel = out[:cnt]
        a, b = self._n_pre, self._n_pre + cnt
        for name, col in store.cols.items():
            self._pre[name][a:b] = col[sel]
        self._pre_rows[a:b] = sel
        chunks = sel // self.chunk_rows
        order = np.argsort(chunks, kind="stable")
        ids, starts = np.unique(chunks[order], return_index=True)
        for c, part in zip(ids.tolist(), np.split(order + a, starts[1:]), strict=True):
            self._by_chunk.setdefault(c, []).append(part)
        self._n_pre = b

    @property
    def preimages(self) -> int:
        """How many rows' pre-images pushes have kept so far."""
        return self._n_pre

    @property
    def done(self) -> bool:
        return self.written >= self.n0

    def next_chunk(self, store: RowStore) -> dict[str, np.ndarray]:
        """Call under the table lock: the held rows of the next chunk of ``[0, n0)`` (all of
        them for a base, possibly none for a delta), pre-images applied, in row order."""
        a = self.written
        b = min(a + self.chunk_rows, self.n0)
        if self._select is None:
            out = {name: col[a:b].copy() for name, col in store.cols.items()}
        else:
            rows = self._select[np.searchsorted(self._select, a) : np.searchsorted(self._select, b)]
            out = {name: col[rows] for name, col in store.cols.items()}
        parts = self._by_chunk.pop(a // self.chunk_rows, None)
        if parts:
            pos = np.concatenate(parts)
            local = self._pre_rows[pos] - a if self._select is None else np.searchsorted(rows, self._pre_rows[pos])
            for name in out:
                out[name][local] = self._pre[name][pos]
        self.written = b
        return out
