"""Open-addressing hash index from uint64 keys to row numbers (numba kernels).

Layout: one ``uint64`` word per slot, ``(tag << 32) | (row + 1)``; 0 marks an empty slot,
so every uint64 key (0 and 2**64-1 included) is a valid key. ``tag`` is the high half of
the key's hash, and its low bits are the key's home slot: a probe only reads the row's key
(``keys[row]``) when the tags agree, so almost every probe costs one random access, and
deletion knows each entry's home from its slot word alone. Linear probing; deletion shifts
the following run back (no tombstones in the index, so lookups never degrade after heavy
eviction). Capacity is a power of two (at most 2**32 slots) and the caller keeps the load
factor below ``MAX_LOAD``.

The slot hash is keyed against hash flooding: SipHash-1-3 of the key's 8 bytes under
a 128-bit secret ``hkey`` (two uint64, :func:`new_hash_key`, from ``os.urandom``). Ids come
from producers; with an unkeyed, invertible mix anyone could compute ids that share one
home slot and turn every insert into a walk along one run (quadratic pushes). Without the
key, landing ids in one run is guessing. Batch kernels hash all their keys first, in one
loop that LLVM vectorizes (~1.5 ns a key), then probe with prefetches from those hashes.
The key is state of the table: it is saved with it (:mod:`tables.table_files`) so a loaded
table rebuilds the same layout, and it is never shown in stats or logs. :func:`mix64`
(unkeyed) stays for the initializers' and sketches' deterministic draws, which are not
probe sequences.
"""

from __future__ import annotations

import os

import numpy as np

from core.kernel_cache import JIT, kernel
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
_C0 = np.uint64(0x736F6D6570736575)  # SipHash's "somepseudorandomlygeneratedbytes"
_C1 = np.uint64(0x646F72616E646F6D)
_C2 = np.uint64(0x6C7967656E657261)
_C3 = np.uint64(0x7465646279746573)
_LEN8 = np.uint64(8 << 56)  # SipHash's last block for an 8-byte message: its length, no tail bytes
_FF = np.uint64(0xFF)
_R13, _R16, _R17, _R21, _R32 = (np.uint64(r) for r in (13, 16, 17, 21, 32))
_R51, _R48, _R47, _R43 = (np.uint64(64 - r) for r in (13, 16, 17, 21))

PF = 16  # how many keys ahead the kernels prefetch


@kernel(inline="always", **JIT)
def mix64(x: np.uint64) -> np.uint64:
    """splitmix64 finalizer: a bijective, well-mixed hash of a uint64."""
    x = (x ^ (x >> _S30)) * _M1
    x = (x ^ (x >> _S27)) * _M2
    return x ^ (x >> _S31)


def new_hash_key() -> np.ndarray:
    """A fresh secret slot-hash key: 16 bytes from ``os.urandom`` as two uint64."""
    return np.frombuffer(os.urandom(16), np.uint64).copy()


@kernel(inline="always", **JIT)
def _sipround(v0: np.uint64, v1: np.uint64, v2: np.uint64, v3: np.uint64) -> tuple:
    v0 += v1
    v1 = ((v1 << _R13) | (v1 >> _R51)) ^ v0
    v0 = (v0 << _R32) | (v0 >> _R32)
    v2 += v3
    v3 = ((v3 << _R16) | (v3 >> _R48)) ^ v2
    v0 += v3
    v3 = ((v3 << _R21) | (v3 >> _R43)) ^ v0
    v2 += v1
    v1 = ((v1 << _R17) | (v1 >> _R47)) ^ v2
    v2 = (v2 << _R32) | (v2 >> _R32)
    return v0, v1, v2, v3


@kernel(inline="always", **JIT)
def keyed_hash(x: np.uint64, k0: np.uint64, k1: np.uint64) -> np.uint64:
    """SipHash-1-3 of the 8 little-endian bytes of ``x`` under the key ``(k0, k1)``."""
    v0, v1, v2, v3 = k0 ^ _C0, k1 ^ _C1, k0 ^ _C2, k1 ^ (_C3 ^ x)
    v0, v1, v2, v3 = _sipround(v0, v1, v2, v3)
    v0 ^= x
    v3 ^= _LEN8
    v0, v1, v2, v3 = _sipround(v0, v1, v2, v3)
    v0 ^= _LEN8
    v2 ^= _FF
    v0, v1, v2, v3 = _sipround(v0, v1, v2, v3)
    v0, v1, v2, v3 = _sipround(v0, v1, v2, v3)
    v0, v1, v2, v3 = _sipround(v0, v1, v2, v3)
    return v0 ^ v1 ^ v2 ^ v3


@kernel(**JIT)
def hash_keys(keys: np.ndarray, hkey: np.ndarray, out: np.ndarray) -> None:
    """``keyed_hash`` of each key into ``out`` (uint64)."""
    k0, k1 = hkey[0], hkey[1]
    for i in range(keys.shape[0]):
        out[i] = keyed_hash(keys[i], k0, k1)


def slots_for(n_rows: int) -> int:
    """Smallest power-of-two slot count that holds ``n_rows`` under MAX_LOAD."""
    cap = 16
    while cap * MAX_LOAD < n_rows:
        cap *= 2
    if cap > 1 << 32:  # the home slot comes from the 32-bit tag
        raise ValueError(f"{n_rows} rows need more than 2**32 index slots")
    return cap


@kernel(inline="always", **JIT)
def find_slot(slots: np.ndarray, keys_col: np.ndarray, k: np.uint64, h: np.uint64, mask: np.uint64) -> np.int64:
    """Slot holding key ``k`` (whose hash is ``h``), or -1. The one probe loop every reader
    and writer shares."""
    tag = h >> U32
    pos = tag & mask
    while True:
        s = slots[pos]
        if s == _ZERO:
            return np.int64(-1)
        if (s >> U32) == tag and keys_col[np.int64(s & LOW32) - 1] == k:
            return np.int64(pos)
        pos = (pos + _ONE) & mask


@kernel(**JIT)
def lookup(slots: np.ndarray, keys_col: np.ndarray, hkey: np.ndarray, query: np.ndarray,
           out_rows: np.ndarray) -> int:
    """Row of each query key into ``out_rows`` (-1 when absent); returns the number absent."""
    mask = np.uint64(slots.shape[0] - 1)
    n = query.shape[0]
    hashes = np.empty(n, np.uint64)
    hash_keys(query, hkey, hashes)
    missing = 0
    for i in range(n):
        if i + PF < n:
            prefetch(slots, (hashes[i + PF] >> U32) & mask)
        pos = find_slot(slots, keys_col, query[i], hashes[i], mask)
        r = np.int64(-1) if pos < 0 else np.int64(slots[pos] & LOW32) - 1
        out_rows[i] = r
        if r < 0:
            missing += 1
    return missing


@kernel(**JIT)
def insert(slots: np.ndarray, keys_col: np.ndarray, hkey: np.ndarray, rows: np.ndarray) -> None:
    """Index ``rows`` (whose keys are already in ``keys_col`` and absent from the index)."""
    mask = np.uint64(slots.shape[0] - 1)
    n = rows.shape[0]
    hashes = np.empty(n, np.uint64)
    hash_keys(keys_col[rows], hkey, hashes)
    for i in range(n):
        if i + PF < n:
            prefetch(slots, (hashes[i + PF] >> U32) & mask)
        h = hashes[i]
        pos = (h >> U32) & mask
        while slots[pos] != _ZERO:
            pos = (pos + _ONE) & mask
        slots[pos] = ((h >> U32) << U32) | np.uint64(rows[i] + 1)


@kernel(**JIT)
def delete(slots: np.ndarray, keys_col: np.ndarray, hkey: np.ndarray, keys: np.ndarray) -> int:
    """Remove ``keys`` from the index (backward-shift deletion); returns how many were present."""
    mask = np.int64(slots.shape[0] - 1)
    n = keys.shape[0]
    hashes = np.empty(n, np.uint64)
    hash_keys(keys, hkey, hashes)
    removed = 0
    for t in range(n):
        if t + PF < n:
            prefetch(slots, (hashes[t + PF] >> U32) & np.uint64(mask))
        i = find_slot(slots, keys_col, keys[t], hashes[t], np.uint64(mask))
        if i < 0:
            continue
        removed += 1
        remove_at(slots, i, mask)
    return removed


@kernel(inline="always", **JIT)
def remove_at(slots: np.ndarray, i: np.int64, mask: np.int64) -> None:
    """Empty slot ``i``, shifting the run after it back (backward-shift deletion): the one
    deletion step every index here shares."""
    j = i
    while True:
        j = (j + 1) & mask
        s = slots[j]
        if s == _ZERO:
            break
        home = np.int64((s >> U32) & np.uint64(mask))
        # The entry at j may move into the hole at i unless its home lies cyclically in (i, j].
        if i <= j:
            stays = i < home <= j
        else:
            stays = home > i or home <= j
        if not stays:
            slots[i] = s
            i = j
    slots[i] = _ZERO


@kernel(**JIT)
def relink(slots: np.ndarray, keys_col: np.ndarray, hkey: np.ndarray, old_rows: np.ndarray,
           new_rows: np.ndarray) -> None:
    """Point the slots of rows moved from ``old_rows`` to ``new_rows`` (keys already copied)."""
    mask = np.uint64(slots.shape[0] - 1)
    n = new_rows.shape[0]
    keys = np.empty(n, np.uint64)
    for t in range(n):
        keys[t] = keys_col[new_rows[t]]
    hashes = np.empty(n, np.uint64)
    hash_keys(keys, hkey, hashes)
    for t in range(n):
        if t + PF < n:
            prefetch(slots, (hashes[t + PF] >> U32) & mask)
        pos = find_slot(slots, keys_col, keys[t], hashes[t], mask)
        s = slots[pos]
        slots[pos] = (s & ~LOW32) | np.uint64(new_rows[t] + 1)


def rebuild(slots: np.ndarray, keys_col: np.ndarray, hkey: np.ndarray, n: int) -> None:
    """Index rows 0..n-1 into an all-empty ``slots``."""
    insert(slots, keys_col, hkey, np.arange(n, dtype=np.int64))


@kernel(**JIT)
def probe_lengths(slots: np.ndarray) -> np.ndarray:
    """Per stored key, how many slots a lookup of it reads (1 = found at its home slot):
    the cost a flood of colliding ids would drive up. For diagnostics and tests."""
    mask = np.uint64(slots.shape[0] - 1)
    out = np.empty(slots.shape[0], np.int64)
    m = 0
    for pos in range(slots.shape[0]):
        s = slots[pos]
        if s != _ZERO:
            home = (s >> U32) & mask
            out[m] = np.int64((np.uint64(pos) - home) & mask) + 1
            m += 1
    return out[:m]
