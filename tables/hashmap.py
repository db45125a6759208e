"""Open-addressing hash index from uint64 keys to row numbers (numba kernels).

Layout: one ``uint64`` word per slot, ``(tag << 32) | (row + 1)``; 0 marks an empty slot,
so every uint64 key (0 and 2**64-1 included) is a valid key. ``tag`` is the high half of
the key's hash: a probe only reads the row's key (``keys[row]``) when the tags agree, so
almost every probe costs one random access. Linear probing; deletion shifts the following
run back (no tombstones in the index, so lookups never degrade after heavy eviction).
Capacity is a power of two and the caller keeps the load factor below ``MAX_LOAD``.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from tables.cache_hint import prefetch

MAX_LOAD = 0.7
LOW32 = np.uint64(0xFFFFFFFF)
U32 = np.uint64(32)
_S30 = np.uint64(30)
_S27 = np.uint64(27)
_S31 = np.uint64(31)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_ONE = np.uint64(1)
_ZERO = np.uint64(0)

JIT = {"cache": True, "nogil": True, "error_model": "numpy"}
PF = 16  # how many keys ahead the kernels prefetch


@njit(inline="always", **JIT)
def mix64(x: np.uint64) -> np.uint64:
    """splitmix64 finalizer: a bijective, well-mixed hash of a uint64."""
    x = (x ^ (x >> _S30)) * _M1
    x = (x ^ (x >> _S27)) * _M2
    return x ^ (x >> _S31)


def slots_for(n_rows: int) -> int:
    """Smallest power-of-two slot count that holds ``n_rows`` under MAX_LOAD."""
    cap = 16
    while cap * MAX_LOAD < n_rows:
        cap *= 2
    return cap


@njit(inline="always", **JIT)
def find_slot(slots: np.ndarray, keys_col: np.ndarray, k: np.uint64, mask: np.uint64) -> np.int64:
    """Slot holding key ``k``, or -1. The one probe loop every reader and writer shares."""
    h = mix64(k)
    tag = h >> U32
    pos = h & mask
    while True:
        s = slots[pos]
        if s == _ZERO:
            return np.int64(-1)
        if (s >> U32) == tag and keys_col[np.int64(s & LOW32) - 1] == k:
            return np.int64(pos)
        pos = (pos + _ONE) & mask


@njit(inline="always", **JIT)
def find_row(slots: np.ndarray, keys_col: np.ndarray, k: np.uint64, mask: np.uint64) -> np.int64:
    """Row of key ``k``, or -1."""
    pos = find_slot(slots, keys_col, k, mask)
    return np.int64(-1) if pos < 0 else np.int64(slots[pos] & LOW32) - 1


@njit(**JIT)
def lookup(slots: np.ndarray, keys_col: np.ndarray, query: np.ndarray, out_rows: np.ndarray) -> int:
    """Row of each query key into ``out_rows`` (-1 when absent); returns the number absent."""
    mask = np.uint64(slots.shape[0] - 1)
    missing = 0
    n = query.shape[0]
    for i in range(n):
        if i + PF < n:
            prefetch(slots, mix64(query[i + PF]) & mask)
        r = find_row(slots, keys_col, query[i], mask)
        out_rows[i] = r
        if r < 0:
            missing += 1
    return missing


@njit(**JIT)
def insert(slots: np.ndarray, keys_col: np.ndarray, rows: np.ndarray) -> None:
    """Index ``rows`` (whose keys are already in ``keys_col`` and absent from the index)."""
    mask = np.uint64(slots.shape[0] - 1)
    for i in range(rows.shape[0]):
        if i + PF < rows.shape[0]:
            prefetch(slots, mix64(keys_col[rows[i + PF]]) & mask)
        r = rows[i]
        h = mix64(keys_col[r])
        pos = h & mask
        while slots[pos] != _ZERO:
            pos = (pos + _ONE) & mask
        slots[pos] = ((h >> U32) << U32) | np.uint64(r + 1)


@njit(**JIT)
def delete(slots: np.ndarray, keys_col: np.ndarray, keys: np.ndarray) -> int:
    """Remove ``keys`` from the index (backward-shift deletion); returns how many were present."""
    mask = np.int64(slots.shape[0] - 1)
    removed = 0
    for t in range(keys.shape[0]):
        i = find_slot(slots, keys_col, keys[t], np.uint64(mask))
        if i < 0:
            continue
        removed += 1
        j = i
        while True:
            j = (j + 1) & mask
            s = slots[j]
            if s == _ZERO:
                break
            home = np.int64(mix64(keys_col[np.int64(s & LOW32) - 1]) & np.uint64(mask))
            # The entry at j may move into the hole at i unless its home lies cyclically in (i, j].
            if i <= j:
                stays = i < home <= j
            else:
                stays = home > i or home <= j
            if not stays:
                slots[i] = s
                i = j
        slots[i] = _ZERO
    return removed


@njit(**JIT)
def relink(slots: np.ndarray, keys_col: np.ndarray, old_rows: np.ndarray, new_rows: np.ndarray) -> None:
    """Point the slots of rows moved from ``old_rows`` to ``new_rows`` (keys already copied)."""
    mask = np.uint64(slots.shape[0] - 1)
    for t in range(old_rows.shape[0]):
        pos = find_slot(slots, keys_col, keys_col[new_rows[t]], mask)
        s = slots[pos]
        slots[pos] = (s & ~LOW32) | np.uint64(new_rows[t] + 1)


def rebuild(slots: np.ndarray, keys_col: np.ndarray, n: int) -> None:
    """Index rows 0..n-1 into an all-empty ``slots``."""
    insert(slots, keys_col, np.arange(n, dtype=np.int64))
