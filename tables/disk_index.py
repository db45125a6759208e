"""The disk tier's index from key to record: its slots are all it keeps in RAM.

The layout and probing are :mod:`tables.hashmap`'s (``(tag << 32) | (record + 1)`` words,
linear probing, backward-shift deletion), but the keys live in the records on disk, not in a
RAM column: a probe whose tag agrees reads the record's key (its first word, from the file's
mapping, :mod:`tables.record_io`), and tags of different keys almost never agree, so a miss
reads nothing. Deletion matches the slot word
itself (tag and record: no key read) and growing rehashes from the words alone (a word's tag
holds its home slot at any capacity). A promotion, which reads the records anyway, skips the
key reads and checks the keys it read.
"""

from __future__ import annotations

import numpy as np

from core.kernel_cache import JIT, kernel
from tables.cache_hint import prefetch
from tables.hashmap import LOW32, PF, U32, hash_keys, remove_at

_ZERO = np.uint64(0)
_ONE = np.uint64(1)


@kernel(**JIT)
def lookup(slots: np.ndarray, hkey: np.ndarray, query: np.ndarray, words: np.ndarray, record_words: int,
           out: np.ndarray, verify: bool) -> None:
    """Record of each query key into ``out`` (-1 when absent); keys are read from the mapped
    file ``words`` (uint64, ``record_words`` a record, the key first). Without ``verify`` the
    first entry whose tag agrees is taken unread: the caller compares the keys of the records
    it reads anyway."""
    mask = np.uint64(slots.shape[0] - 1)
    n = query.shape[0]
    hashes = np.empty(n, np.uint64)
    hash_keys(query, hkey, hashes)
    for i in range(n):
        if i + PF < n:
            prefetch(slots, (hashes[i + PF] >> U32) & mask)
        tag = hashes[i] >> U32
        pos = tag & mask
        out[i] = -1
        while True:
            s = slots[pos]
            if s == _ZERO:
                break
            if (s >> U32) == tag:
                rec = np.int64(s & LOW32) - 1
                if not verify:
                    out[i] = rec
                    break
                if words[rec * record_words] == query[i]:
                    out[i] = rec
                    break
            pos = (pos + _ONE) & mask


@kernel(**JIT)
def update(slots: np.ndarray, hkey: np.ndarray, keys: np.ndarray, records: np.ndarray, remove: bool) -> None:
    """Index ``keys`` (absent from the index) at ``records``; with ``remove``, take their
    entries out instead (the word, tag and record, is matched whole: no key is read)."""
    mask = np.uint64(slots.shape[0] - 1)
    n = keys.shape[0]
    hashes = np.empty(n, np.uint64)
    hash_keys(keys, hkey, hashes)
    for i in range(n):
        if i + PF < n:
            prefetch(slots, (hashes[i + PF] >> U32) & mask)
        tag = hashes[i] >> U32
        word = (tag << U32) | np.uint64(records[i] + 1)
        pos = tag & mask
        while slots[pos] != _ZERO and not (remove and slots[pos] == word):
            pos = (pos + _ONE) & mask
        if not remove:
            slots[pos] = word
        elif slots[pos] == word:
            remove_at(slots, np.int64(pos), np.int64(mask))


@kernel(**JIT)
def regrow(old: np.ndarray, new: np.ndarray) -> None:
    """Every entry of ``old`` into the empty, larger ``new``."""
    mask = np.uint64(new.shape[0] - 1)
    for s in old:
        if s != _ZERO:
            pos = (s >> U32) & mask
            while new[pos] != _ZERO:
                pos = (pos + _ONE) & mask
            new[pos] = s


@kernel(**JIT)
def live(slots: np.ndarray, high: int) -> np.ndarray:
    """Which of records 0..high-1 the index holds."""
    out = np.zeros(high, np.bool_)
    for s in slots:
        if s != _ZERO:
            out[np.int64(s & LOW32) - 1] = True
    return out
