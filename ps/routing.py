"""Where parameters live: pure functions from keys and dense names to shards.

Sparse keys: a key's virtual shard is ``(fmix64(key ^ ROUTING_SALT) >> 32) % 4096`` where
``fmix64`` is MurmurHash3's 64-bit finalizer, and its shard is ``placement.table[virtual shard]``
(:mod:`ps.placement`; a plain shard count ``n`` means its default placement ``v % n``). The salt
and the use of the high 32 bits keep the routing independent of the table's own slot hash, so
every shard's hash map stays evenly filled. Changing the hash moves keys between virtual
shards: it is part of the checkpoint format.

Dense arrays: small ones live whole on ``crc32(name) % n``; arrays of at least
``slice_min_elements`` elements are cut into ``n`` nearly equal contiguous slices of the
flattened array, slice ``i`` on shard ``(crc32(name) + i) % n`` (Paddle's slice_var_up).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np

from core.kernel_cache import kernel
from ps.placement import VIRTUAL_SHARDS, Placement, default_placement
from tables.dedupe import dedupe, sum_rows, sum_values

ROUTING_SALT = np.uint64(0x2545F4914F6CDD1D)
DEFAULT_SLICE_MIN_ELEMENTS = 1 << 16


def _fmix64_np(z: np.ndarray) -> np.ndarray:
    z = z ^ (z >> np.uint64(33))
    z = z * np.uint64(0xFF51AFD7ED558CCD)
    z = z ^ (z >> np.uint64(33))
    z = z * np.uint64(0xC4CEB9FE1A85EC53)
    return z ^ (z >> np.uint64(33))


Where = int | Placement  # a shard count (its default placement) or a placement


def placement_of(where: Where) -> Placement:
    return where if isinstance(where, Placement) else default_placement(int(where))


_VMASK = np.uint64(VIRTUAL_SHARDS - 1)


def virtual_shard_of(keys: np.ndarray) -> np.ndarray:
    """Virtual shard (int64) of each uint64 key; pure and vectorized."""
    keys = np.asarray(keys, dtype=np.uint64)
    with np.errstate(over="ignore"):
        return ((_fmix64_np(keys ^ ROUTING_SALT) >> np.uint64(32)) & _VMASK).astype(np.int64)


def shard_of(keys: np.ndarray, where: Where) -> np.ndarray:
    """Shard index (int64) of each uint64 key under ``where``; pure and vectorized."""
    return placement_of(where).table[virtual_shard_of(keys)].astype(np.int64)


_U64 = (1 << 64) - 1


def shard_of_key(key: int, where: Where) -> int:
    """:func:`shard_of` of one key in plain Python ints: ~1 us where the array forms cost
    tens of microseconds in call overhead (a service's single-id lookups)."""
    z = key ^ int(ROUTING_SALT)
    z ^= z >> 33
    z = (z * 0xFF51AFD7ED558CCD) & _U64
    z ^= z >> 33
    z = (z * 0xC4CEB9FE1A85EC53) & _U64
    z ^= z >> 33
    return int(placement_of(where).table[(z >> 32) & (VIRTUAL_SHARDS - 1)])


@kernel(inline="always")
def _fmix64(z: np.uint64) -> np.uint64:
    z ^= z >> np.uint64(33)
    z *= np.uint64(0xFF51AFD7ED558CCD)
    z ^= z >> np.uint64(33)
    z *= np.uint64(0xC4CEB9FE1A85EC53)
    return z ^ (z >> np.uint64(33))


@kernel(nogil=True)
def _group(uniq: np.ndarray, first_inverse: np.ndarray, table: np.ndarray, n_shards: int,
           salt: np.uint64) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Route (as :func:`shard_of`, ``table`` the placement) and counting-sort the unique keys by
    shard, in one pass each."""
    m = uniq.shape[0]
    shard = np.empty(m, np.int64)
    offsets = np.zeros(n_shards + 1, np.int64)
    mask = np.uint64(table.shape[0] - 1)
    for j in range(m):
        s = np.int64(table[np.int64((_fmix64(uniq[j] ^ salt) >> np.uint64(32)) & mask)])
        shard[j] = s
        offsets[s + 1] += 1
    for s in range(n_shards):
        offsets[s + 1] += offsets[s]
    fill = offsets[:-1].copy()
    grouped = np.empty(m, np.uint64)
    order = np.empty(m, np.int64)
    position = np.empty(m, np.int64)
    for j in range(m):
        p = fill[shard[j]]
        fill[shard[j]] += 1
        grouped[p] = uniq[j]
        order[p] = j
        position[j] = p
    inverse = np.empty(first_inverse.shape[0], np.int64)
    for i in range(first_inverse.shape[0]):
        inverse[i] = position[first_inverse[i]]
    return grouped, inverse, offsets, order


@dataclass(frozen=True)
class KeyPlan:
    """Deduplicated keys grouped by shard.

    ``keys[offsets[s]:offsets[s+1]]`` go to shard ``s``; input position ``i`` maps to
    ``keys[inverse[i]]``, so rows gathered in ``keys`` order are put back in input order by
    ``rows[inverse]``.
    """

    keys: np.ndarray
    inverse: np.ndarray
    offsets: np.ndarray
    first_seen_inverse: np.ndarray  # input -> index in first-seen order (tables.dedupe)
    order: np.ndarray  # grouped position -> first-seen index

    def shard_slice(self, shard: int) -> slice:
        return slice(int(self.offsets[shard]), int(self.offsets[shard + 1]))

    def sum_by_key(self, values: np.ndarray) -> np.ndarray:
        """Per-input rows (n, w) or values (n,) summed per unique key, in ``keys`` order."""
        m = self.keys.shape[0]
        if values.ndim == 1:
            return sum_values(np.ascontiguousarray(values, np.float32), self.first_seen_inverse, m)[self.order]
        return sum_rows(np.ascontiguousarray(values, np.float32), self.first_seen_inverse, m)[self.order]


def plan_keys(keys: np.ndarray, where: Where) -> KeyPlan:
    """Deduplicate ``keys`` and group them by :func:`shard_of` (O(n), no sort)."""
    keys = np.ascontiguousarray(keys, dtype=np.uint64).reshape(-1)
    placement = placement_of(where)
    uniq, first_inverse = dedupe(keys)
    grouped, inverse, offsets, order = _group(uniq, first_inverse, placement.table, placement.n_shards, ROUTING_SALT)
    return KeyPlan(grouped, inverse, offsets, first_inverse, order)


def route_keys(keys: np.ndarray, where: Where) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`plan_keys` without deduplication, for small pulls (repeats are gathered twice,
    cheaper than a dedupe pass): ``(grouped, position, offsets)``, ``keys[i] ==
    grouped[position[i]]``, shard ``s``'s keys ``grouped[offsets[s]:offsets[s+1]]``."""
    placement = placement_of(where)
    grouped, position, offsets, _ = _group(keys, np.arange(keys.shape[0]), placement.table, placement.n_shards,
                                           ROUTING_SALT)
    return grouped, position, offsets


@dataclass(frozen=True)
class DenseSlice:
    """Elements ``[start, stop)`` of a flattened dense array, stored on ``shard`` as ``part``."""

    part: str
    shard: int
    start: int
    stop: int


def name_hash(name: str) -> int:
    return zlib.crc32(name.encode())


def place_dense(
    name: str, size: int, n_shards: int, *, slice_min_elements: int = DEFAULT_SLICE_MIN_ELEMENTS
) -> list[DenseSlice]:
    """Slices of a dense array of ``size`` elements, in order, covering ``[0, size)``."""
    home = name_hash(name) % n_shards
    if size < slice_min_elements or n_shards == 1:
        return [DenseSlice(name, home, 0, size)]
    bounds = np.linspace(0, size, n_shards + 1).round().astype(np.int64)
    return [
        DenseSlice(f"{name}.slice{i}of{n_shards}", (home + i) % n_shards, int(bounds[i]), int(bounds[i + 1]))
        for i in range(n_shards)
    ]
