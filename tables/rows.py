"""Struct-of-arrays row storage of a sparse table.

One array per column, row ``r`` of every column belongs to the same id. Capacity grows by
doubling into ``np.empty`` arrays: untouched pages are never faulted in, so resident memory
tracks the rows actually stored, not the capacity. Rows stay dense (0..n-1): eviction moves
the last rows into the holes (see ``TableState.remove``), which keeps saves sequential.
"""

from __future__ import annotations

import ctypes
import mmap
import sys

import numpy as np

_libc = ctypes.CDLL(None, use_errno=True)
MOVE_CHUNK = 1 << 11  # rows a bulk move (removal, promotion, demotion) copies at a time: its copies stay small

# name -> dtype; 2-d columns get their width from the table layout.
COLUMN_DTYPES: dict[str, np.dtype] = {
    "keys": np.dtype(np.uint64),
    "params": np.dtype(np.float32),  # [wide weight,] embedding
    "state": np.dtype(np.float32),  # optimizer state of the embedding columns
    "wide_state": np.dtype(np.float32),  # optimizer state of the wide weight
    "show": np.dtype(np.float32),  # decayed show count as of pass `last_seen`
    "click": np.dtype(np.float32),  # decayed click count as of pass `last_seen`
    "last_seen": np.dtype(np.int32),  # pass of the last push
    "created": np.dtype(np.int32),  # pass the row was created in
    "mod_epoch": np.dtype(np.uint32),  # save epoch of the last change (drives delta saves)
}


def release_pages(part: np.ndarray) -> None:
    """Give the whole pages of ``part`` (of an array about to be dropped, which nothing else
    reads) back to the kernel now."""
    page = mmap.PAGESIZE
    begin = -(-part.ctypes.data // page) * page  # whole pages only: the allocator's headers lie outside
    end = (part.ctypes.data + part.nbytes) // page * page
    if end > begin:
        _libc.madvise(ctypes.c_void_p(begin), ctypes.c_size_t(end - begin), mmap.MADV_DONTNEED)


def column_words(cols: dict[str, np.ndarray], names: tuple[str, ...] = tuple(COLUMN_DTYPES)) -> tuple[np.ndarray, ...]:
    """Columns ``names`` of ``cols`` (C-contiguous; default every column, in ``COLUMN_DTYPES``'
    order) as 2-d uint32 arrays, a row per row: one kernel moves whole rows through these,
    whatever the columns' types (every column is a whole number of 4-byte words a row)."""
    out = []
    for name in names:
        col = cols[name]
        per_row = col.itemsize * (col.shape[1] if col.ndim == 2 else 1) // 4
        out.append(col.view(np.uint32).reshape(col.shape[0], per_row))
    return tuple(out)


class RowStore:
    """Columns with a shared row count ``n`` and capacity."""

    def __init__(self, widths: dict[str, int], capacity: int) -> None:
        self.widths = dict(widths)  # column -> 0 for 1-d, else the 2-d width
        self.n = 0
        self.cols: dict[str, np.ndarray] = {name: self._alloc(name, capacity) for name in COLUMN_DTYPES}

    def _alloc(self, name: str, capacity: int) -> np.ndarray:
        w = self.widths.get(name, 0)
        shape = (capacity,) if w == 0 and name not in ("params", "state", "wide_state") else (capacity, w)
        return np.empty(shape, COLUMN_DTYPES[name])

    @property
    def capacity(self) -> int:
        return self.cols["keys"].shape[0]

    def reserve(self, n_rows: int, limit: int | None = None) -> None:
        """Make room for ``n_rows`` rows in total (amortized doubling), never growing past
        ``limit`` rows (a byte budget's row limit) unless ``n_rows`` itself does."""
        if n_rows <= self.capacity:
            return
        cap = max(self.capacity, 16)
        while cap < n_rows:
            cap *= 2
        if limit is not None:
            cap = min(cap, max(limit, n_rows))
        self.resize(cap)

    def resize(self, capacity: int) -> None:
        """Reallocate every column to ``capacity`` rows (at least ``n``), keeping the rows. A
        column nothing else refers to gives its pages back as they are copied, so a column's
        old and new arrays are never both whole in RAM."""
        for name in list(self.cols):
            old = self.cols[name]
            alone = sys.getrefcount(old) == 3  # this frame, the dict and the call's argument: no view of it lives
            new = self._alloc(name, max(capacity, self.n))
            for s in range(0, self.n, MOVE_CHUNK):
                e = min(self.n, s + MOVE_CHUNK)
                new[s:e] = old[s:e]
                if alone:
                    release_pages(old[s:e])
            self.cols[name] = new

    def used_nbytes(self) -> int:
        """Bytes of the stored rows (excluding spare capacity)."""
        return sum(c[: self.n].nbytes for c in self.cols.values())

    def row_nbytes(self) -> int:
        return sum(c.dtype.itemsize * (c.shape[1] if c.ndim == 2 else 1) for c in self.cols.values())
