"""The hash index kernels against a Python dict, and the table over the full uint64 range."""

from __future__ import annotations

import numpy as np
import pytest

from tables import hashmap
from tables.initializers import initial_rows
from tables.sparse_table import SparseTable
from tables.table_config import EvictionConfig, InitializerConfig, OptimizerConfig, TableConfig

M64 = (1 << 64) - 1
SPECIAL = [0, 1, 2**63, 2**64 - 1, 2**32, 2**32 - 1, 2**63 - 1]


def _rotl(x: int, b: int) -> int:
    return ((x << b) | (x >> (64 - b))) & M64


def py_siphash(x: int, k0: int, k1: int, c: int = 1, d: int = 3) -> int:
    """SipHash-c-d of the 8 little-endian bytes of ``x`` in Python ints (independent of the
    numba one; c=2, d=4 is checked against the reference vector)."""
    v = [k0 ^ 0x736F6D6570736575, k1 ^ 0x646F72616E646F6D, k0 ^ 0x6C7967656E657261, k1 ^ 0x7465646279746573]

    def rounds(n: int) -> None:
        for _ in range(n):
            v[0] = (v[0] + v[1]) & M64
            v[1] = _rotl(v[1], 13) ^ v[0]
            v[0] = _rotl(v[0], 32)
            v[2] = (v[2] + v[3]) & M64
            v[3] = _rotl(v[3], 16) ^ v[2]
            v[0] = (v[0] + v[3]) & M64
            v[3] = _rotl(v[3], 21) ^ v[0]
            v[2] = (v[2] + v[1]) & M64
            v[1] = _rotl(v[1], 17) ^ v[2]
            v[2] = _rotl(v[2], 32)

    for m in (x, 8 << 56):  # the message word, then the length block
        v[3] ^= m
        rounds(c)
        v[0] ^= m
    v[2] ^= 0xFF
    rounds(d)
    return v[0] ^ v[1] ^ v[2] ^ v[3]


def test_keyed_hash_is_siphash13() -> None:
    # The reference's vector: key 00..0f, message 00..07 -> 62 24 93 9a 79 f5 f5 93 (SipHash-2-4).
    k0, k1, msg = 0x0706050403020100, 0x0F0E0D0C0B0A0908, 0x0706050403020100
    assert py_siphash(msg, k0, k1, c=2, d=4) == 0x93F5F5799A932462
    rng = np.random.default_rng(5)
    keys = np.concatenate([np.array(SPECIAL, np.uint64), rng.integers(0, 2**64, 200, dtype=np.uint64)])
    for hkey in (np.array([k0, k1], np.uint64), hashmap.new_hash_key()):
        out = np.empty(keys.shape[0], np.uint64)
        hashmap.hash_keys(keys, hkey, out)
        assert [int(h) for h in out] == [py_siphash(int(x), int(hkey[0]), int(hkey[1])) for x in keys]


class Index:
    """The kernels driven the way SparseTable drives them: dense rows 0..n-1, holes filled
    from the end after a delete (delete, move, relink), slots rebuilt when they fill up."""

    def __init__(self, slots: int = 16) -> None:
        self.slots = np.zeros(slots, np.uint64)
        self.keys = np.empty(0, np.uint64)
        self.hkey = hashmap.new_hash_key()

    def home(self, k: int) -> int:
        """The key's home slot: the low bits of its tag (the hash's high half)."""
        return (py_siphash(k, int(self.hkey[0]), int(self.hkey[1])) >> 32) & (self.slots.shape[0] - 1)

    def lookup(self, query: list[int]) -> np.ndarray:
        out = np.empty(len(query), np.int64)
        missing = hashmap.lookup(self.slots, self.keys, self.hkey, np.array(query, np.uint64), out)
        assert missing == int((out < 0).sum())
        return out

    def insert(self, new: list[int]) -> None:
        n0 = self.keys.shape[0]
        self.keys = np.concatenate([self.keys, np.array(new, np.uint64)])
        if self.keys.shape[0] > self.slots.shape[0] * hashmap.MAX_LOAD:
            slots = np.zeros(hashmap.slots_for(self.keys.shape[0]), np.uint64)
            hashmap.rebuild(slots, self.keys, self.hkey, n0)
            self.slots = slots
        hashmap.insert(self.slots, self.keys, self.hkey, np.arange(n0, self.keys.shape[0], dtype=np.int64))

    def delete(self, gone: list[int], also_absent: list[int]) -> None:
        n = self.keys.shape[0]
        removed = hashmap.delete(self.slots, self.keys, self.hkey, np.array(gone + also_absent, np.uint64))
        assert removed == len(gone)
        mask = np.isin(self.keys, np.array(gone, np.uint64))
        new_n = n - int(mask.sum())
        holes = np.flatnonzero(mask[:new_n])
        srcs = np.flatnonzero(~mask[new_n:]) + new_n
        self.keys[holes] = self.keys[srcs]
        hashmap.relink(self.slots, self.keys, self.hkey, srcs, holes)
        self.keys = self.keys[:new_n].copy()


def check(index: Index, present: set[int], absent: list[int]) -> None:
    keys = sorted(present)
    rows = index.lookup(keys)
    assert (rows >= 0).all()
    assert [int(index.keys[r]) for r in rows] == keys, "every key must map to its own row"
    assert sorted(rows.tolist()) == list(range(len(keys)))
    assert (index.lookup(absent) == -1).all()
    assert int((index.slots != 0).sum()) == len(keys), "no stale slots after deletes"


@pytest.mark.parametrize("seed", range(4))
def test_random_ops_match_a_set(seed: int) -> None:
    rng = np.random.default_rng(seed)
    idx, ref = Index(), set()
    for step in range(60):
        op = rng.integers(3)
        if op < 2:  # insert a batch of new keys (specials, full-range randoms, small ints)
            cand = {int(x) for x in rng.integers(0, 2**64, size=20, dtype=np.uint64)}
            cand |= {int(x) for x in rng.integers(0, 200, size=10)} | set(SPECIAL)
            new = sorted(cand - ref)
            idx.insert(new)
            ref |= set(new)
        elif ref:
            pool = sorted(ref)
            gone = [pool[i] for i in rng.choice(len(pool), size=rng.integers(1, len(pool) + 1), replace=False)]
            absent = [int(x) for x in rng.integers(2**62, 2**63, size=5, dtype=np.uint64) if int(x) not in ref]
            idx.delete(gone, absent)
            ref -= set(gone)
        absent = [int(x) for x in rng.integers(0, 2**64, size=30, dtype=np.uint64) if int(x) not in ref]
        check(idx, ref, absent + [k for k in SPECIAL + list(range(200)) if k not in ref])
        if step % 15 == 14:  # rebuild into a fresh index: same answers
            slots = np.zeros(hashmap.slots_for(len(ref) + 1), np.uint64)
            hashmap.rebuild(slots, idx.keys, idx.hkey, idx.keys.shape[0])
            idx.slots = slots
            check(idx, ref, absent)


def test_colliding_home_slots_and_wraparound() -> None:
    """Many keys with the same home slot (and tag-only collisions) in a small index; deleting
    from the middle of runs that wrap past the end must keep every other key reachable."""
    slots = 64
    mask = slots - 1
    idx = Index(slots)
    by_home: dict[int, list[int]] = {}
    k = 0
    while sum(len(v) for v in by_home.values()) < 40:
        home = idx.home(k)
        if home in (mask - 1, mask, 0, 5) and len(by_home.setdefault(home, [])) < 10:
            by_home[home].append(k)
        k += 1
    keys = [x for v in by_home.values() for x in v]
    # Keys equal to other keys' hashes, to their slot words, and to their row numbers.
    k0, k1 = int(idx.hkey[0]), int(idx.hkey[1])
    keys += [py_siphash(keys[0], k0, k1), (py_siphash(keys[1], k0, k1) >> 32 << 32) | 1, 2, 3]
    keys = list(dict.fromkeys(keys))
    idx.insert(keys)
    lengths = hashmap.probe_lengths(idx.slots)
    assert lengths.max() >= 10, "the test must build long runs"
    where = {int(idx.keys[int(s & 0xFFFFFFFF) - 1]): pos for pos, s in enumerate(idx.slots) if s}
    expect = sorted((where[k] - idx.home(k)) % slots + 1 for k in keys)
    assert sorted(lengths.tolist()) == expect, "probe lengths from the slot words match the reference homes"
    ref = set(keys)
    check(idx, ref, [k + 1_000_000 for k in keys])
    rng = np.random.default_rng(1)
    for _ in range(5):
        pool = sorted(ref)
        gone = [pool[i] for i in rng.choice(len(pool), size=max(1, len(pool) // 4), replace=False)]
        idx.delete(gone, [])
        ref -= set(gone)
        check(idx, ref, gone)
    idx.insert(sorted(set(keys) - ref))
    check(idx, set(keys), [])


@pytest.mark.slow
def test_million_keys_full_range_then_evict_a_third() -> None:
    """1M random keys (plus 0, 2**63, 2**64-1): all retrievable; evict a third through
    shrink(); the rest keep their values, the evicted read as never-seen ids."""
    rng = np.random.default_rng(7)
    keys = np.unique(np.concatenate([rng.integers(0, 2**64 - 1, size=1_000_000, dtype=np.uint64, endpoint=True),
                                     np.array(SPECIAL, np.uint64)]))
    keys = rng.permutation(keys)
    n = keys.shape[0]
    cfg = TableConfig(name="big", dim=1, seed=3, initializer=InitializerConfig(kind="uniform", scale=1.0),
                      optimizer=OptimizerConfig(kind="sgd", lr=1.0),
                      eviction=EvictionConfig(delete_threshold=0.5, nonclick_coeff=1.0))
    t = SparseTable(cfg)
    grads = (np.arange(n) % 1000).astype(np.float32).reshape(n, 1)
    shows = np.where(np.arange(n) % 3 == 0, 0.0, 1.0).astype(np.float32)  # score 0 -> evicted
    for a in range(0, n, 250_000):  # several pushes, so the index grows and rebuilds
        t.push(keys[a : a + 250_000], grads[a : a + 250_000], shows=shows[a : a + 250_000])
    init = initial_rows(keys, 1, seed=3, kind="uniform", scale=1.0)
    expect = init - grads
    assert t.size() == n
    np.testing.assert_array_equal(t.pull(keys), expect)
    assert t.contains(keys).all()

    gone = shows == 0
    assert t.shrink() == int(gone.sum())
    assert t.size() == n - int(gone.sum())
    assert np.array_equal(t.contains(keys), ~gone)
    got = t.pull(keys)
    np.testing.assert_array_equal(got[~gone], expect[~gone])
    np.testing.assert_array_equal(got[gone], init[gone])
    rows = t.lookup_rows(keys[~gone])
    assert np.array_equal(np.sort(rows), np.arange(t.size())), "rows stay dense and distinct"
    # Specials survived or not according to their position; either way they read right.
    for k in (0, 2**63, 2**64 - 1):
        i = int(np.flatnonzero(keys == np.uint64(k))[0])
        np.testing.assert_array_equal(t.pull([k])[0], init[i] if gone[i] else expect[i])
