"""Batch deduplication: unique keys in first-seen order and each input's unique index.

A batch-local open-addressing table (numba) instead of ``np.unique``: it keeps first-seen
order (so results are reproducible) and runs in one pass without sorting. Its slot hash is
keyed (:func:`tables.hashmap.keyed_hash`) with a secret drawn per process: the batch's keys
come from producers, and with an unkeyed hash crafted ids would share one probe run here
before the table's own index is reached. First-seen order does not depend on the key.
"""

from __future__ import annotations

import numpy as np

from core.kernel_cache import JIT, kernel
from tables.cache_hint import prefetch
from tables.hashmap import PF, hash_keys, new_hash_key

_ONE = np.uint64(1)
_KEY = new_hash_key()  # passed to the kernel, never a global of it: cached machine code would freeze it


@kernel(**JIT)
def _dedupe(keys: np.ndarray, uniq: np.ndarray, inverse: np.ndarray, hkey: np.ndarray) -> int:
    n = keys.shape[0]
    cap = 16
    while cap < 2 * n:
        cap *= 2
    table = np.full(cap, -1, np.int64)
    mask = np.uint64(cap - 1)
    hashes = np.empty(n, np.uint64)
    hash_keys(keys, hkey, hashes)  # one vectorized pass
    m = 0
    for i in range(n):
        if i + PF < n:
            prefetch(table, hashes[i + PF] & mask)
        pos = hashes[i] & mask
        k = keys[i]
        while True:
            u = table[pos]
            if u < 0:
                table[pos] = m
                uniq[m] = k
                inverse[i] = m
                m += 1
                break
            if uniq[u] == k:
                inverse[i] = u
                break
            pos = (pos + _ONE) & mask
    return m


def dedupe(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Return ``(uniq, inverse)`` with ``uniq[inverse] == keys``, ``uniq`` in first-seen order."""
    uniq = np.empty_like(keys)
    inverse = np.empty(keys.shape[0], np.int64)
    m = _dedupe(keys, uniq, inverse, _KEY)
    return uniq[:m], inverse


@kernel(**JIT)
def sum_rows(values: np.ndarray, inverse: np.ndarray, m: int) -> np.ndarray:
    """Sum the rows of ``values`` (n, d) that share an ``inverse`` index into (m, d).

    ``inverse`` comes from :func:`dedupe` (first-seen order), so each unique index first
    appears in increasing order: its first row is copied, later ones added, and the output
    needs no zero-filling pass."""
    out = np.empty((m, values.shape[1]), np.float32)
    seen = 0
    for i in range(values.shape[0]):
        u = inverse[i]
        if u == seen:
            seen += 1
            for j in range(values.shape[1]):
                out[u, j] = values[i, j]
        else:
            for j in range(values.shape[1]):
                out[u, j] += values[i, j]
    return out


@kernel(**JIT)
def sum_values(values: np.ndarray, inverse: np.ndarray, m: int) -> np.ndarray:
    """Sum the entries of ``values`` (n,) that share an ``inverse`` index into (m,)."""
    out = np.zeros(m, np.float32)
    for i in range(values.shape[0]):
        out[inverse[i]] += values[i]
    return out
