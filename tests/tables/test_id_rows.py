"""Id-rows tables: the ring kernel against a slow Python reference; put, save/load, shrink."""

from __future__ import annotations

import numpy as np
import pytest

from core.errors import InvalidInput
from tables.id_rows_kernels import ring_unroll, ring_words
from tables.id_rows_table import IdRowsTable, id_rows_config, time_bits


def _reference(keys, ids, times, cap):
    """key -> list of (id, time), newest first, at most cap; an entry among the kept ones is not added again."""
    hist: dict[int, list[tuple[int, float]]] = {}
    for k, i, t in zip(keys.tolist(), ids.tolist(), times.tolist(), strict=True):
        kept = hist.setdefault(k, [])
        if (i, t) not in kept[-cap:]:
            kept.append((i, t))
    return {k: list(reversed(v))[:cap] for k, v in hist.items()}


def _check(table, ref, cap, keys):
    rows, found = table.read(keys)
    ids, times, lengths = ring_unroll(rows)
    for j, k in enumerate(keys.tolist()):
        want = ref.get(k, [])
        assert found[j] == (k in ref)
        assert lengths[j] == len(want)
        assert ids[j, : len(want)].tolist() == [i for i, _ in want]
        assert times[j, : len(want)].tolist() == [t for _, t in want]
        assert (ids[j, len(want):] == 0).all() and np.isnan(times[j, len(want):]).all()


@pytest.mark.parametrize("cap", [1, 3, 50])
def test_ring_append_matches_reference(cap):
    rng = np.random.default_rng(cap)
    table = IdRowsTable(id_rows_config("ids.history", ring_words(cap)))
    all_keys, all_ids, all_times = [], [], []
    t0 = 1.7e9
    for _ in range(20):  # many appends of random sizes, keys repeated within and across calls
        n = int(rng.integers(0, 200))
        keys = rng.integers(0, 40, n).astype(np.uint64) | np.uint64(1 << 63)
        ids = rng.integers(0, 2**64, n, dtype=np.uint64)
        times = t0 + np.arange(n) * 0.25
        t0 += n
        if n > 20 and rng.random() < 0.5:  # some events again (a replay): kept ones are not appended twice
            again = rng.integers(0, n, 10)
            keys, ids, times = np.r_[keys, keys[again]], np.r_[ids, ids[again]], np.r_[times, times[again]]
        table.append(keys, ids, time_bits(times))
        all_keys.append(keys), all_ids.append(ids), all_times.append(times)
    ref = _reference(np.concatenate(all_keys), np.concatenate(all_ids), np.concatenate(all_times), cap)
    probe = np.concatenate([np.array(sorted(ref), np.uint64), np.array([5, 2**64 - 1], np.uint64)])
    _check(table, ref, cap, probe)


def test_put_last_wins_and_refuses_bad_shapes():
    table = IdRowsTable(id_rows_config("ids.items", 4))
    keys = np.array([7, 9, 7], np.uint64)
    values = np.arange(12, dtype=np.uint64).reshape(3, 4)
    table.put(keys, values)
    rows, found = table.read(np.array([7, 9, 8], np.uint64))
    assert found.tolist() == [True, True, False]
    assert rows.tolist() == [[8, 9, 10, 11], [4, 5, 6, 7], [0, 0, 0, 0]]
    with pytest.raises(InvalidInput):
        table.put(keys, values.astype(np.int64))
    with pytest.raises(InvalidInput):
        table.push(keys, np.zeros((3, 8), np.float32))


def test_save_load_delta_and_shrink(tmp_path):
    cap = 4
    table = IdRowsTable(id_rows_config("ids.history", ring_words(cap), ttl_passes=1))
    keys = np.array([1, 2, 1, 1, 3], np.uint64)
    ids = np.array([10, 20, 11, 12, 30], np.uint64)
    times = np.arange(5, dtype=np.float64)
    table.append(keys, ids, time_bits(times))
    # a delta on a cursor without a base is written as a base (the table may be younger than its shard's base)
    assert table.save(tmp_path / "a", mode="delta", cursor="export")["mode"] == "base"
    table.append(np.array([2], np.uint64), np.array([21], np.uint64), time_bits(np.array([5.0])))
    assert table.save(tmp_path / "b", mode="delta", cursor="export")["rows"] == 1
    back = IdRowsTable(id_rows_config("ids.history", ring_words(cap), ttl_passes=1))
    back.load(tmp_path / "a")
    back.load(tmp_path / "b")
    ref = _reference(np.r_[keys, 2].astype(np.uint64), np.r_[ids, 21].astype(np.uint64), np.r_[times, 5.0], cap)
    _check(back, ref, cap, np.array([1, 2, 3, 4], np.uint64))
    # eviction by last write, like any table's ttl
    for _ in range(2):
        back.end_pass()
    back.append(np.array([3], np.uint64), np.array([31], np.uint64), time_bits(np.array([6.0])))
    assert back.shrink() == 2
    assert back.read(np.array([1, 2, 3], np.uint64))[1].tolist() == [False, False, True]
