"""The disk tier keeps only its index in RAM: every other column of a disk row is read back
from its record, and keys whose index tags agree are told apart by the keys on disk."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tables import hashmap
from tables.disk_tier import DiskTier
from tables.rows import COLUMN_DTYPES

WIDTHS = {"params": 5, "state": 10, "wide_state": 2}


def rows(keys: np.ndarray, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    m = keys.shape[0]
    out = {name: rng.integers(0, 1000, (m, WIDTHS[name]) if name in WIDTHS else m).astype(dt)
           for name, dt in COLUMN_DTYPES.items()}
    out["keys"] = keys
    return out


def tier(tmp_path: Path, hkey: np.ndarray) -> DiskTier:
    return DiskTier(tmp_path, "t", WIDTHS, 1 << 24, hkey)


def same_tag_pair(hkey: np.ndarray) -> np.ndarray:
    """Two keys whose 32-bit index tags agree (a birthday search: a few among 300K keys)."""
    keys = np.arange(1, 300_001, dtype=np.uint64)
    h = np.empty(keys.shape[0], np.uint64)
    hashmap.hash_keys(keys, hkey, h)
    tags = h >> np.uint64(32)
    order = np.argsort(tags, kind="stable")
    twin = np.flatnonzero(tags[order][1:] == tags[order][:-1])
    assert twin.shape[0] > 0
    return keys[order[[twin[0], twin[0] + 1]]]


def test_every_column_of_a_disk_row_comes_back_from_its_record(tmp_path: Path) -> None:
    d = tier(tmp_path, hashmap.new_hash_key())
    keys = np.arange(10, 3010, dtype=np.uint64) * np.uint64(7919)
    put = rows(keys, 0)
    d.put(put)
    assert d.ram_bytes() == d.slots.nbytes + d.free_bits.nbytes + d._span.nbytes  # no row column stays in RAM
    pick = np.random.default_rng(1).permutation(keys)[:700]
    at = d.lookup(pick)
    got = d.read(at)
    where = np.searchsorted(keys, pick)
    for name, col in put.items():
        np.testing.assert_array_equal(got[name], col[where], err_msg=name)
    taken = d.take(pick)
    np.testing.assert_array_equal(taken["params"], put["params"][where])
    assert d.rows == keys.shape[0] - pick.shape[0] and (d.lookup(pick) < 0).all()


def test_keys_whose_tags_agree_are_told_apart_by_their_records(tmp_path: Path) -> None:
    hkey = hashmap.new_hash_key()
    pair = same_tag_pair(hkey)
    d = tier(tmp_path, hkey)
    put = rows(pair, 2)
    d.put(put)
    at = d.lookup(pair)
    assert at[0] != at[1] and (at >= 0).all()
    np.testing.assert_array_equal(d.read(at)["keys"], pair)
    second = d.take(pair[1:])  # its probe meets the first key's entry first
    np.testing.assert_array_equal(second["keys"], pair[1:])
    np.testing.assert_array_equal(second["state"], put["state"][1:])
    assert d.lookup(pair[1:])[0] == -1 and d.lookup(pair[:1])[0] == at[0]


def test_a_promotion_into_a_full_ram_and_a_full_disk_keeps_the_rows_it_promotes(tmp_path: Path) -> None:
    from tables.sparse_table import SparseTable
    from tables.table_config import DiskTierConfig, EvictionConfig, OptimizerConfig, TableConfig, TierConfig

    table = SparseTable(TableConfig(name="t", dim=8, optimizer=OptimizerConfig(kind="adam", lr=0.01),
                                    eviction=EvictionConfig(max_bytes=100_000),
                                    tier=TierConfig(disk=DiskTierConfig(path=str(tmp_path), max_bytes=60_000))))
    ids = np.arange(1, 2001, dtype=np.uint64)
    for start in range(0, ids.shape[0], 100):
        table.push(ids[start : start + 100], np.ones((100, table.width), np.float32))
    on_disk = ids[table.tier.lookup(ids) >= 0]
    assert table.tier.disk.room() < on_disk.shape[0]  # the disk is full: a demotion must evict from it
    expected, found = table.pull_existing(on_disk)
    assert found.all()
    np.testing.assert_array_equal(table.pull(on_disk), expected)  # promoted, not evicted and created again
