"""Where the disk tier writes rows: past its last record, in one run, while freed records are
few; into the lowest freed records once they are many, or when the file cannot grow."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from core.errors import DiskFull
from tables import hashmap, record_io
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


def test_mapped_reads_match_pread_across_file_growth(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(record_io, "RESERVE_BYTES", 1 << 16)  # a small first mapping: the file outgrows it
    widths = {"params": 5, "state": 3, "wide_state": 0}  # a 4-byte-odd record, padded to whole words
    d = DiskTier(tmp_path, "t", widths, 1 << 26, hashmap.new_hash_key())
    assert d.record_bytes % record_io.WORD == 0 and d.record_bytes >= d.dtype.fields["mod_epoch"][1] + 4
    rng = np.random.default_rng(3)
    for part in range(6):  # each put grows the file past the last mapping's reach at least once
        keys = np.arange(1, 50_001, dtype=np.uint64) + np.uint64(part * 100_000)
        cols = {name: np.zeros((keys.shape[0], widths[name]) if name in widths else keys.shape[0], dt)
                for name, dt in COLUMN_DTYPES.items()}
        cols["keys"] = keys
        cols["params"][:] = rng.standard_normal(cols["params"].shape).astype(np.float32)
        cols["show"][:] = rng.random(keys.shape[0]).astype(np.float32)
        d.put(cols)
        at = d.lookup(keys)
        pick = rng.choice(keys.shape[0], 2000, replace=False)
        got = d.read(at[pick])
        with open(d.path, "rb") as f:  # the slow reference: one pread per record, unpacked by numpy
            raw = np.frombuffer(b"".join(os.pread(f.fileno(), d.record_bytes, int(r) * d.record_bytes)
                                         for r in at[pick]), d.dtype)
        for name in COLUMN_DTYPES:
            np.testing.assert_array_equal(got[name], raw[name])
        np.testing.assert_array_equal(got["params"], cols["params"][pick])
        out = np.full((4000, widths["params"]), np.nan, np.float32)
        dest = rng.choice(4000, 2000, replace=False)
        d.read_params(at[pick], dest, out)
        np.testing.assert_array_equal(out[dest], cols["params"][pick])
        assert np.isnan(np.delete(out, dest, axis=0)).all()
    assert d.file_bytes() > 5 * (1 << 16)
    d.close()


def test_scattered_and_run_writes_land_as_pread_reads_them(tmp_path: Path) -> None:
    d = DiskTier(tmp_path, "t", WIDTHS, 1 << 26, hashmap.new_hash_key())
    rng = np.random.default_rng(4)
    first = np.arange(1, 20_001, dtype=np.uint64)
    d.put(rows(first))  # one run past the end: pwrite
    gone = np.sort(rng.choice(first, 4_000, replace=False))  # scattered holes, and a few runs among them
    gone = np.union1d(gone, first[5_000:5_100])
    d.free(records_of(d, gone), gone)
    assert d.room() and int(d._free.shape[0]) > HOLE_SHARE * d.rows
    fresh = np.arange(100_001, 100_001 + gone.shape[0], dtype=np.uint64)
    d.put(rows(fresh))  # into the holes: short runs through the mapping, long ones by pwrite
    assert d.high == first.shape[0]
    with open(d.path, "rb") as f:  # the slow reference: every record by pread
        raw = np.frombuffer(os.pread(f.fileno(), d.high * d.record_bytes, 0), d.dtype)
    live = np.setdiff1d(first, gone)
    for keys in (live, fresh):
        at = records_of(d, keys)
        np.testing.assert_array_equal(raw["keys"][at], keys)
        np.testing.assert_array_equal(raw["params"][at, 0], keys.astype(np.float32))
    d.close()
