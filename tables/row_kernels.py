"""Per-row kernels of the sparse table's hot paths (numba)."""

from __future__ import annotations

import numpy as np

from core.kernel_cache import JIT, kernel
from tables.cache_hint import prefetch, prefetch_end, prefetch_row
from tables.hashmap import PF, lookup
from tables.initializers import fill_row


@kernel(**JIT)
def gather(
    slots: np.ndarray, keys_col: np.ndarray, hkey: np.ndarray, params: np.ndarray, query: np.ndarray,
    out: np.ndarray, rows: np.ndarray, fill_missing: bool,
    c0: int, dim: int, seed: np.uint64, kind: int, scale: np.float32,
    wseed: np.uint64, wkind: int, wscale: np.float32,
) -> int:
    """Pull: copy each key's row into ``out`` (input order) and its row number into ``rows``
    (-1: absent); with ``fill_missing`` an absent key gets its initializer row (a disk tier
    fills its keys' first, :func:`fill_rows` the rest). Returns the number of absent keys.

    Two passes (all lookups, then all copies) rather than one fused loop: each pass keeps
    many independent misses in flight with a simple prefetch, which measured ~2x faster.
    """
    n = query.shape[0]
    missing = lookup(slots, keys_col, hkey, query, rows)
    width = params.shape[1]
    for i in range(n):
        if i + PF < n and rows[i + PF] >= 0:
            prefetch(params, rows[i + PF])
            prefetch_end(params, rows[i + PF])  # a row may straddle two lines
        r = rows[i]
        if r >= 0:
            for j in range(width):
                out[i, j] = params[r, j]
        elif fill_missing:
            if c0 == 1:
                fill_row(out[i], 0, 1, query[i], wseed, wkind, wscale)
            fill_row(out[i], c0, dim, query[i], seed, kind, scale)
    return missing


@kernel(**JIT)
def touch(
    show: np.ndarray, click: np.ndarray, last_seen: np.ndarray, mod_epoch: np.ndarray, rows: np.ndarray,
    shows: np.ndarray, clicks: np.ndarray, current_pass: int, epoch: np.uint32, decay: np.float32,
) -> None:
    """Metadata of pushed rows: decay show/click to the current pass, add this push's counts."""
    for i in range(rows.shape[0]):
        if i + PF < rows.shape[0]:
            q = rows[i + PF]
            prefetch(show, q)
            prefetch(click, q)
            prefetch(last_seen, q)
            prefetch(mod_epoch, q)
        r = rows[i]
        age = current_pass - last_seen[r]
        f = decay ** np.float32(age) if age > 0 else np.float32(1.0)
        show[r] = show[r] * f + shows[i]
        click[r] = click[r] * f + clicks[i]
        last_seen[r] = current_pass
        mod_epoch[r] = epoch


@kernel(**JIT)
def move_rows(cols: tuple, holes: np.ndarray, srcs: np.ndarray) -> None:
    """Row ``srcs[i]`` of every column into row ``holes[i]`` (``cols``: the columns as 2-d uint32
    words, :func:`tables.rows.column_words`): a removal filling its holes with the last rows."""
    n = holes.shape[0]
    for i in range(n):
        if i + PF < n:
            prefetch_row(cols, srcs[i + PF])
            prefetch_row(cols, holes[i + PF])
        h, s = holes[i], srcs[i]
        for c in range(len(cols)):
            col = cols[c]
            for j in range(col.shape[1]):
                col[h, j] = col[s, j]
