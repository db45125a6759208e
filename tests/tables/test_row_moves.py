"""The kernels that move whole rows through every column at once (a removal's hole filling,
a disk write's packing into records), against numpy's per-column copies."""

from __future__ import annotations

import numpy as np
import pytest

from tables import hashmap
from tables.admission import AlwaysAdmit
from tables.disk_tier import record_dtype
from tables.record_io import pack, unpack
from tables.row_kernels import move_rows
from tables.rows import COLUMN_DTYPES, RowStore, column_words
from tables.table_state import TableState


def filled_store(widths: dict[str, int], n: int, rng: np.random.Generator) -> RowStore:
    """A store of ``n`` rows of random bytes (distinct keys) in every column."""
    store = RowStore(widths, n + 7)
    for col in store.cols.values():
        flat = col.reshape(col.shape[0], -1).view(np.uint8)
        flat[:] = rng.integers(0, 256, flat.shape, dtype=np.uint8)
    store.cols["keys"][:] = rng.permutation(np.arange(1, n + 8, dtype=np.uint64)) * np.uint64(0x9E3779B97F4A7C15)
    store.n = n
    return store


WIDTHS = [{"params": 9, "state": 18, "wide_state": 1}, {"params": 8, "state": 16, "wide_state": 0},
          {"params": 1, "state": 0, "wide_state": 0}]


@pytest.mark.parametrize("widths", WIDTHS)
def test_move_rows_copies_every_column_as_numpy_does(widths: dict[str, int]) -> None:
    rng = np.random.default_rng(1)
    store = filled_store(widths, 3000, rng)
    want = {name: col.copy() for name, col in store.cols.items()}
    holes = np.sort(rng.choice(2500, 400, replace=False))
    srcs = np.arange(2600, 3000)
    move_rows(column_words(store.cols), holes, srcs)
    for name, col in want.items():
        col[holes] = col[srcs]
        np.testing.assert_array_equal(store.cols[name].view(np.uint8), col.view(np.uint8), err_msg=name)


@pytest.mark.parametrize("widths", WIDTHS)
def test_pack_lays_rows_out_as_the_record_dtype_with_zero_padding(widths: dict[str, int]) -> None:
    rng = np.random.default_rng(2)
    store = filled_store(widths, 2000, rng)
    dtype = record_dtype(widths)
    rows = rng.permutation(2000)[:777]
    out = np.full((rows.shape[0], dtype.itemsize // 4), 0xDEADBEEF, np.uint32)
    pack(column_words(store.cols), rows, out)
    got = out.view(dtype).reshape(-1)
    for name in COLUMN_DTYPES:
        np.testing.assert_array_equal(np.ascontiguousarray(got[name]).view(np.uint8),
                                      store.cols[name][rows].view(np.uint8), err_msg=name)
    used = sum(dtype.fields[name][0].itemsize for name in COLUMN_DTYPES)
    assert not out.view(np.uint8).reshape(rows.shape[0], -1)[:, used:].any()  # padding: zeros, never stale bytes


def test_remove_keeps_every_surviving_row_whole_and_indexed() -> None:
    rng = np.random.default_rng(3)
    store = filled_store({"params": 5, "state": 10, "wide_state": 1}, 5000, rng)
    state = TableState.indexed(store, hashmap.new_hash_key(), AlwaysAdmit(), capacity=store.capacity)
    before = {name: col[: store.n].copy() for name, col in store.cols.items()}
    mask = rng.random(store.n) < 0.3
    state.remove(mask)
    keep = np.flatnonzero(~mask)
    assert state.rows.n == keep.shape[0]
    rows = state.lookup(before["keys"][keep])
    assert (rows >= 0).all() and np.array_equal(np.sort(rows), np.arange(keep.shape[0]))
    for name, col in before.items():
        np.testing.assert_array_equal(state.rows.cols[name][rows].view(np.uint8), col[keep].view(np.uint8))
    assert (state.lookup(before["keys"][mask]) == -1).all()


@pytest.mark.parametrize("names", [tuple(COLUMN_DTYPES), ("keys",), ("show", "click", "last_seen"), ("params",)])
def test_unpack_reads_the_asked_columns_of_any_records(names: tuple[str, ...]) -> None:
    rng = np.random.default_rng(4)
    widths = WIDTHS[0]
    store = filled_store(widths, 1500, rng)
    dtype = record_dtype(widths)
    file_words = np.empty((1500, dtype.itemsize // 4), np.uint32)  # the records as the mapped file holds them
    pack(column_words(store.cols), np.arange(1500), file_words)
    records = rng.integers(0, 1500, 900)  # any order, repeats
    out = {name: np.empty((900, *dtype[name].shape), dtype[name].base) for name in names}
    offsets = np.array([dtype.fields[name][1] // 4 for name in names], np.int64)
    unpack(file_words.reshape(-1), dtype.itemsize // 4, records, offsets, column_words(out, names))
    for name in names:
        np.testing.assert_array_equal(out[name].view(np.uint8), store.cols[name][records].view(np.uint8), err_msg=name)
