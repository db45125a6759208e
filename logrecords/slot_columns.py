"""Per-slot ragged columns from the (row, slot, id) triples a parser kernel writes.

The JSON and CSV kernels write one triple per id as they meet it, rows in order; records they
reject or leave to the reference path are marked in ``status`` (0 = OK). :func:`group_by_slot`
turns the triples of the OK records into each slot's ``(values, offsets)`` in one pass
(a counting sort: no argsort, no Python loop over slots' rows).
"""

from __future__ import annotations

import numpy as np

from core.kernel_cache import kernel

OK = 0


@kernel(nogil=True, error_model="numpy")
def group_by_slot(
    status: np.ndarray, t_row: np.ndarray, t_slot: np.ndarray, t_id: np.ndarray, n_slots: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Ids of the OK rows grouped per slot (rows kept in order): values, slot bases, offsets[slot, row]."""
    n = status.shape[0]
    new_row = np.full(n, -1, dtype=np.int64)
    kept = 0
    for i in range(n):
        if status[i] == OK:
            new_row[i] = kept
            kept += 1
    offsets = np.zeros((n_slots, kept + 1), dtype=np.int64)
    m = t_id.shape[0]
    for k in range(m):
        r = new_row[t_row[k]]
        if r >= 0:
            offsets[t_slot[k], r + 1] += 1
    base = np.zeros(n_slots + 1, dtype=np.int64)
    for j in range(n_slots):
        for r in range(kept):
            offsets[j, r + 1] += offsets[j, r]
        base[j + 1] = base[j] + offsets[j, kept]
    values = np.empty(base[n_slots], dtype=np.uint64)
    fill = offsets[:, :kept].copy()
    for k in range(m):
        r = new_row[t_row[k]]
        if r >= 0:
            j = t_slot[k]
            values[base[j] + fill[j, r]] = t_id[k]
            fill[j, r] += 1
    return values, base, offsets


def first_ids(ragged: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """The first id of every row of a ragged slot (0 where the row holds none)."""
    values, offsets = ragged
    has = offsets[1:] > offsets[:-1]
    out = np.zeros(offsets.shape[0] - 1, dtype=np.uint64)
    out[has] = values[offsets[:-1][has]]
    return out
