"""The items the two towers trained on, kept to be drawn as sampled negatives (uniform over items).

A direct-mapped table of ``capacity`` items keyed by item hash (a later item whose hash maps
to a taken place replaces the earlier one: memory stays bounded, and what is kept is a
uniform-by-hash subset of the items seen). Each place keeps the item's ids in every item
slot (up to ``max_ids`` per slot). ``sample(k)`` draws k places uniformly among the taken
ones, so each kept item is drawn k / size times per step on average: its logQ correction.

Sampling (at feature-building time, maybe in the prefetch thread) may read a place that a
training step is rewriting; the drawn item is then a mix of two real items. It is still a
valid negative; nothing else reads those arrays.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from core.kernel_cache import JIT, kernel
from logrecords.batch import Batch, Ragged
from tables.hashmap import mix64


@kernel(**JIT)
def _place(item_hash, rows, key, taken, n_taken, where):
    """where[r] = place of item ``rows[r]``; new places are appended to ``taken``. Returns the new count."""
    mask = np.uint64(key.shape[0] - 1)
    for r in range(rows.shape[0]):
        h = item_hash[rows[r]]
        p = np.int64(mix64(h) & mask)
        if key[p] == 0 and h != 0:
            taken[n_taken] = p
            n_taken += 1
        key[p] = h if h != 0 else np.uint64(1)
        where[r] = p
    return n_taken


@kernel(**JIT)
def _store_slot(rows, where, values, offsets, ids, lens):
    max_ids = ids.shape[1]
    for r in range(rows.shape[0]):
        i, p = rows[r], where[r]
        a = offsets[i]
        m = min(offsets[i + 1] - a, max_ids)
        for j in range(m):
            ids[p, j] = values[a + j]
        lens[p] = m


class NegativePool:
    def __init__(self, slots: Sequence[str], *, capacity: int, max_ids: int, n_dense: int) -> None:
        if capacity < 1 or capacity & (capacity - 1):
            raise ValueError(f"capacity must be a power of two, got {capacity}")
        self.slots = tuple(slots)
        self.n_dense = n_dense
        self.key = np.zeros(capacity, np.uint64)
        self.taken = np.zeros(capacity, np.int64)
        self.size = 0
        self.ids = [np.zeros((capacity, max_ids), np.uint64) for _ in self.slots]
        self.lens = [np.zeros(capacity, np.int32) for _ in self.slots]

    def add(self, slots: dict[str, Ragged], item_hash: np.ndarray, rows: np.ndarray) -> None:
        """Keep the items of records ``rows`` (their item slots' ids in ``slots``, hashes in ``item_hash``)."""
        rows = np.ascontiguousarray(rows, np.int64)
        where = np.empty(rows.shape[0], np.int64)
        self.size = int(_place(item_hash, rows, self.key, self.taken, self.size, where))
        for k, name in enumerate(self.slots):
            got = slots.get(name)
            if got is None:
                self.lens[k][where] = 0
            else:
                _store_slot(rows, where, got[0], got[1], self.ids[k], self.lens[k])

    def sample(self, k: int, rng: np.random.Generator) -> tuple[Batch, np.ndarray]:
        """k items drawn uniformly (with replacement) among those kept: an item-slots-only batch and their hashes."""
        places = self.taken[rng.integers(0, self.size, k)]
        slots = {}
        for name, ids, lens in zip(self.slots, self.ids, self.lens, strict=True):
            n_ids = lens[places].astype(np.int64)
            offsets = np.zeros(k + 1, np.int64)
            np.cumsum(n_ids, out=offsets[1:])
            picked = ids[places]
            slots[name] = (np.ascontiguousarray(picked[np.arange(ids.shape[1])[None, :] < n_ids[:, None]]), offsets)
        batch = Batch(labels=np.zeros(k, np.float32), dense=np.zeros((k, self.n_dense), np.float32), slots=slots)
        return batch, self.key[places].copy()
