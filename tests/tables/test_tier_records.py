"""Where the disk tier writes rows: past its last record, in one run, while freed records are
few; into the lowest freed records once they are many, or when the file cannot grow."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from core.errors import DiskFull
from tables import hashmap
from tables.disk_tier import HOLE_SHARE, DiskTier
from tables.rows import COLUMN_DTYPES

WIDTHS = {"params": 3, "state": 3, "wide_state": 0}


def rows(keys: np.ndarray) -> dict[str, np.ndarray]:
    out = {name: np.zeros((keys.shape[0], WIDTHS[name]) if name in WIDTHS else keys.shape[0], dt)
           for name, dt in COLUMN_DTYPES.items()}
    out["keys"] = keys
    out["params"][:, 0] = keys.astype(np.float32)
    return out


def records_of(d: DiskTier, keys: np.ndarray) -> np.ndarray:
    at = d.lookup(keys)
    assert (at >= 0).all()
    return at


def test_few_holes_append_and_many_are_filled_lowest_first(tmp_path: Path) -> None:
    d = DiskTier(tmp_path, "t", WIDTHS, 1 << 24, hashmap.new_hash_key())
    first = np.arange(1, 1001, dtype=np.uint64)
    d.put(rows(first))
    np.testing.assert_array_equal(np.sort(records_of(d, first)), np.arange(1000))
    few = first[:50]  # 50 holes: under HOLE_SHARE of 950 rows
    assert HOLE_SHARE * 950 >= 50
    d.free(records_of(d, few), few)
    second = np.arange(2001, 2101, dtype=np.uint64)
    d.put(rows(second))
    np.testing.assert_array_equal(np.sort(records_of(d, second)), np.arange(1000, 1100))  # one run past the end
    many = first[100:400]  # 350 holes now: past the share
    d.free(records_of(d, many), many)
    third = np.arange(3001, 3101, dtype=np.uint64)
    d.put(rows(third))
    holes = np.sort(np.concatenate([np.arange(50), np.arange(100, 400)]))
    np.testing.assert_array_equal(np.sort(records_of(d, third)), holes[:100])  # the lowest holes
    assert d.high == 1100 and d.rows == 1100 - 350 + 100
    back = third[records_of(d, third) == 0]  # the row third put into record 0
    d.free(records_of(d, back), back)
    fourth = np.arange(4001, 4011, dtype=np.uint64)
    d.put(rows(fourth))  # holes freed after a write are ordered with the rest
    np.testing.assert_array_equal(np.sort(records_of(d, fourth)), np.concatenate([[0], holes[100:109]]))
    third = third[third != back[0]]
    for keys in (first[400:], second, third, fourth):
        np.testing.assert_array_equal(d.read(records_of(d, keys), ("params",))["params"][:, 0],
                                      keys.astype(np.float32))


def test_a_file_that_cannot_grow_fills_its_holes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    d = DiskTier(tmp_path, "t", WIDTHS, 1 << 24, hashmap.new_hash_key())
    first = np.arange(1, 1001, dtype=np.uint64)
    d.put(rows(first))  # the file has room for GROW_RECORDS records: grow past it below
    d.put(rows(np.arange(10_001, 10_001 + d.file_records - 1000, dtype=np.uint64)))
    d.free(records_of(d, first[:20]), first[:20])

    def no_space(fd: int, offset: int, length: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("tables.disk_tier.os.posix_fallocate", no_space)
    fits = np.arange(5001, 5021, dtype=np.uint64)
    d.put(rows(fits))
    np.testing.assert_array_equal(np.sort(records_of(d, fits)), np.sort(np.arange(20)))
    with pytest.raises(DiskFull, match="no room to grow"):
        d.put(rows(np.array([6001], np.uint64)))  # no hole left: nothing written
    assert not (d.lookup(np.array([6001], np.uint64)) >= 0).any()
