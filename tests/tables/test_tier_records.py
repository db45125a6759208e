"""Where the disk tier writes rows: past its last record, in one run, while its live records
fill the file past ``FULL_SHARE``; else into the free records the write head sweeps from the
file's start, a span at a time (or when the file cannot grow)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from core.errors import DiskFull
from tables import free_records, hashmap, record_io
from tables.disk_tier import FULL_SHARE, DiskTier
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


def test_the_head_appends_while_the_file_is_full_and_then_sweeps_free_records_from_the_start(
        tmp_path: Path) -> None:
    d = DiskTier(tmp_path, "t", WIDTHS, 1 << 24, hashmap.new_hash_key())
    first = np.arange(1, 1001, dtype=np.uint64)
    d.put(rows(first))
    np.testing.assert_array_equal(np.sort(records_of(d, first)), np.arange(1000))
    few = first[:50]
    d.free(records_of(d, few), few)
    second = np.arange(2001, 2101, dtype=np.uint64)
    d.put(rows(second))  # 1,050 live of 1,000 records: past FULL_SHARE, so one run past the end
    assert FULL_SHARE * 1000 < 950 + 100
    np.testing.assert_array_equal(np.sort(records_of(d, second)), np.arange(1000, 1100))
    many = first[100:500]
    d.free(records_of(d, many), many)
    third = np.arange(3001, 3101, dtype=np.uint64)
    d.put(rows(third))  # 750 live of 1,100: the head wraps and takes the free records from the start
    assert FULL_SHARE * 1100 >= 650 + 100
    holes = np.concatenate([np.arange(50), np.arange(100, 500)])
    np.testing.assert_array_equal(np.sort(records_of(d, third)), holes[:100])
    assert d.high == 1100 and d.rows == 750 and d.head == holes[99] + 1
    back = third[records_of(d, third) == 0]  # record 0, freed behind the head: taken on its next sweep
    d.free(records_of(d, back), back)
    fourth = np.arange(4001, 4011, dtype=np.uint64)
    d.put(rows(fourth))
    np.testing.assert_array_equal(np.sort(records_of(d, fourth)), holes[100:110])
    fifth = np.arange(5001, 5342, dtype=np.uint64)
    d.put(rows(fifth))  # the 340 free records left before the end; the file is full again, so one past it
    assert FULL_SHARE * 1100 < 759 + 341
    np.testing.assert_array_equal(np.sort(records_of(d, fifth)), np.concatenate([holes[110:], [1100]]))
    assert d.head == d.high == 1101 and free_records.is_free(d.free_bits, np.array([0]))[0]
    third = third[third != back[0]]
    for keys in (first[500:], second, third, fourth, fifth):
        np.testing.assert_array_equal(d.read(records_of(d, keys), ("params",))["params"][:, 0],
                                      keys.astype(np.float32))
    d.close()


def test_records_freed_while_a_save_reads_are_passed_over_unchanged_until_it_ends(tmp_path: Path) -> None:
    d = DiskTier(tmp_path, "t", WIDTHS, 1 << 24, hashmap.new_hash_key())
    first = np.arange(1, 4001, dtype=np.uint64)
    d.put(rows(first))
    gone = first[::3]  # dense free records: the next write is one span by pread and pwrite
    d.free(records_of(d, gone), gone)
    held = first[1:600:3]
    held_at = records_of(d, held)
    d.hold()
    d.free(held_at, held)
    assert d.room() == d.max_records - d.rows - held.shape[0]
    with open(d.path, "rb") as f:
        before = np.frombuffer(os.pread(f.fileno(), d.high * d.record_bytes, 0), d.dtype)
    fresh = np.arange(10_001, 10_201, dtype=np.uint64)
    d.put(rows(fresh))  # the head sweeps over the held records
    assert not np.isin(records_of(d, fresh), held_at).any()
    with open(d.path, "rb") as f:
        after = np.frombuffer(os.pread(f.fileno(), d.high * d.record_bytes, 0), d.dtype)
    np.testing.assert_array_equal(after[held_at], before[held_at])  # what the save reads is what it held
    d.release()
    d.head = 0
    more = np.arange(20_001, 20_001 + gone.shape[0] - 200 + held.shape[0], dtype=np.uint64)
    d.put(rows(more))  # the held records are free again
    assert np.isin(held_at, records_of(d, more)).all()
    d.close()


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


def test_spans_and_scattered_writes_land_as_pread_reads_them(tmp_path: Path) -> None:
    d = DiskTier(tmp_path, "t", WIDTHS, 1 << 26, hashmap.new_hash_key())
    rng = np.random.default_rng(4)
    first = np.arange(1, 20_001, dtype=np.uint64)
    d.put(rows(first))  # one run past the end: pwrite
    dense = np.sort(rng.choice(first[:10_000], 3_000, replace=False))  # close free records: spans
    lone = first[10_000:12_000:200]  # far apart: stored through the mapping
    d.free(records_of(d, dense), dense)
    d.free(records_of(d, lone), lone)
    d.free(records_of(d, first[12_000:]), first[12_000:])  # room enough that the head wraps
    fresh = np.arange(100_001, 100_001 + dense.shape[0] + lone.shape[0], dtype=np.uint64)
    d.put(rows(fresh))
    np.testing.assert_array_equal(np.sort(records_of(d, fresh)), np.sort(np.concatenate([dense, lone]) - 1))
    with open(d.path, "rb") as f:  # the slow reference: every record by pread
        raw = np.frombuffer(os.pread(f.fileno(), d.high * d.record_bytes, 0), d.dtype)
    live = np.setdiff1d(first[:12_000], np.concatenate([dense, lone]))
    for keys in (live, fresh):
        at = records_of(d, keys)
        np.testing.assert_array_equal(raw["keys"][at], keys)
        np.testing.assert_array_equal(raw["params"][at, 0], keys.astype(np.float32))
    d.close()


def test_a_push_that_fails_to_write_leaves_its_rows_as_they_were(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    d = DiskTier(tmp_path, "t", WIDTHS, 1 << 24, hashmap.new_hash_key())
    keys = np.arange(1, 3001, dtype=np.uint64)
    d.put(rows(keys))
    pushed = keys[::7]
    at = records_of(d, pushed)
    update = d.read(at)
    update["params"][:, 0] += 1000.0

    def failing(fd, words, records, rows, near, span):  # the kernel's arguments
        return np.int64(records[0])

    monkeypatch.setattr("tables.disk_tier.scatter", failing)
    with pytest.raises(OSError, match="short write"):
        d.rewrite(at, update)
    monkeypatch.undo()
    np.testing.assert_array_equal(records_of(d, pushed), at)  # the rows are where they were, unchanged
    np.testing.assert_array_equal(d.read(at, ("params",))["params"][:, 0], pushed.astype(np.float32))
    assert d.rows == keys.shape[0] and d.room() == d.max_records - d.rows
    d.rewrite(at, update)  # and a write that succeeds moves them
    moved = records_of(d, pushed)
    assert not np.isin(moved, at).any()
    np.testing.assert_array_equal(d.read(moved, ("params",))["params"][:, 0], pushed.astype(np.float32) + 1000)
    d.close()
