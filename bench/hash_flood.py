"""Hash flooding: crafted ids against the table's keyed index.

The ids are crafted against the OLD, unkeyed slot hash (splitmix64's finalizer, a bijection):
inverting it yields ids whose hashes all have the same low 32 bits, so in the old index every
one of them has the same home slot and each insert walks the whole run (quadratic pushes).
For 5k/10k/20k/40k ids, in the same run:

- ``old``: an index with the old unkeyed hash (reimplemented here, insert as it was), crafted
  vs random ids: the baseline, showing the attack;
- ``keyed``: a push of the same ids into today's SparseTable (keyed SipHash-1-3 index),
  crafted vs random, and the longest probe run in its index.

Target: the keyed ratio crafted/random close to 1x, not growing per doubling.
Run: ``python -m bench.hash_flood [--sizes 5000,10000,20000,40000] [--repeats 3] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from core.kernel_cache import kernel
from tables import hashmap
from tables.sparse_table import SparseTable
from tables.table_config import OptimizerConfig, TableConfig

M64 = (1 << 64) - 1
_M1, _M2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB


def old_mix(x: int) -> int:
    """The old unkeyed slot hash (splitmix64 finalizer), in Python ints."""
    x = ((x ^ (x >> 30)) * _M1) & M64
    x = ((x ^ (x >> 27)) * _M2) & M64
    return x ^ (x >> 31)


def _unxorshift(y: int, s: int) -> int:
    x = y
    for _ in range(64 // s + 1):
        x = y ^ (x >> s)
    return x


def old_unmix(h: int) -> int:
    """The id whose old hash is ``h``."""
    x = _unxorshift(h, 31)
    x = (x * pow(_M2, -1, 1 << 64)) & M64
    x = _unxorshift(x, 27)
    x = (x * pow(_M1, -1, 1 << 64)) & M64
    return _unxorshift(x, 30)


def crafted_ids(n: int) -> np.ndarray:
    """``n`` ids whose old hashes are ``i << 32``: one home slot (0) in any index of up to
    2**32 slots, distinct tags."""
    ids = np.array([old_unmix((i + 1) << 32) for i in range(n)], np.uint64)
    assert all(old_mix(int(k)) & 0xFFFFFFFF == 0 for k in ids[:100])
    return ids


_S30, _S27, _S31, _S32 = np.uint64(30), np.uint64(27), np.uint64(31), np.uint64(32)


@kernel(error_model="numpy")
def _old_mix_nb(x: np.uint64) -> np.uint64:
    x = (x ^ (x >> _S30)) * np.uint64(_M1)
    x = (x ^ (x >> _S27)) * np.uint64(_M2)
    return x ^ (x >> _S31)


@kernel(error_model="numpy")
def _old_insert(slots: np.ndarray, keys: np.ndarray) -> None:
    """The old index's insert (unkeyed hash, linear probing), rows 0..n-1."""
    mask = np.uint64(slots.shape[0] - 1)
    for r in range(keys.shape[0]):
        h = _old_mix_nb(keys[r])
        pos = h & mask
        while slots[pos] != np.uint64(0):
            pos = (pos + np.uint64(1)) & mask
        slots[pos] = ((h >> _S32) << _S32) | np.uint64(r + 1)


def time_old(crafted: np.ndarray, rand: np.ndarray, repeats: int) -> tuple[float, float]:
    """Best insert times into the old index of ``crafted`` and ``rand`` (alternating runs)."""
    best = [float("inf"), float("inf")]
    for _ in range(repeats):
        for j, keys in enumerate((crafted, rand)):
            slots = np.zeros(hashmap.slots_for(keys.shape[0]), np.uint64)
            t = time.perf_counter()
            _old_insert(slots, keys)
            best[j] = min(best[j], time.perf_counter() - t)
    return best[0], best[1]


def time_keyed(crafted: np.ndarray, rand: np.ndarray, repeats: int) -> tuple[float, float, int, int]:
    """Best push times of ``crafted`` and ``rand`` into fresh tables (alternating runs), and
    the longest probe run each left in its index."""
    cfg = TableConfig(name="flood", dim=8, optimizer=OptimizerConfig(kind="sgd", lr=0.1))
    best, longest = [float("inf"), float("inf")], [0, 0]
    for _ in range(repeats):
        for j, keys in enumerate((crafted, rand)):
            grads = np.full((keys.shape[0], cfg.width), 0.01, np.float32)
            t = SparseTable(cfg)
            t0 = time.perf_counter()
            t.push(keys, grads)
            best[j] = min(best[j], time.perf_counter() - t0)
            st = t.state
            probes = hashmap.probe_lengths(st.slots)
            longest[j] = max(longest[j], int(probes.max()))
    return best[0], best[1], longest[0], longest[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="5000,10000,20000,40000")
    ap.add_argument("--repeats", type=int, default=3, help="best of this many runs per figure")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    rng = np.random.default_rng(0)
    warm = rng.integers(0, 2**64, 2000, dtype=np.uint64)
    time_old(warm, warm, 1), time_keyed(warm, warm, 1)  # compile outside the timings
    rows = []
    for n in sizes:
        crafted = crafted_ids(n)
        rand = rng.integers(0, 2**64, n, dtype=np.uint64)
        old_c, old_r = time_old(crafted, rand, args.repeats)
        new_c, new_r, probe_c, probe_r = time_keyed(crafted, rand, args.repeats)
        rows.append({"keys": n, "old_crafted_s": old_c, "old_random_s": old_r, "old_ratio": old_c / old_r,
                     "keyed_crafted_s": new_c, "keyed_random_s": new_r, "keyed_ratio": new_c / new_r,
                     "keyed_max_probe_crafted": probe_c, "keyed_max_probe_random": probe_r})
    if args.json:
        print(json.dumps({"bench": "hash_flood", "repeats": args.repeats, "rows": rows}))
        return
    print(f"{'keys':>6} | {'old index: crafted':>18} {'random':>9} {'ratio':>8} | "
          f"{'keyed push: crafted':>19} {'random':>9} {'ratio':>6} | max probe crafted/random")
    for r in rows:
        print(f"{r['keys']:>6} | {r['old_crafted_s'] * 1e3:>15.2f} ms {r['old_random_s'] * 1e3:>6.2f} ms "
              f"{r['old_ratio']:>7.0f}x | {r['keyed_crafted_s'] * 1e3:>16.2f} ms {r['keyed_random_s'] * 1e3:>6.2f} ms "
              f"{r['keyed_ratio']:>5.2f}x | {r['keyed_max_probe_crafted']} / {r['keyed_max_probe_random']}")


if __name__ == "__main__":
    main()
