"""The disk tier's free-record bits against a slow reference: a boolean per record."""

from __future__ import annotations

import numpy as np
import pytest

from tables import free_records


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_mark_and_scan_match_a_boolean_per_record(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 5_000))
    bits = np.zeros(free_records.bits_for(n), np.uint8)
    ref = np.zeros(n, np.bool_)
    for _ in range(20):
        records = rng.choice(n, int(rng.integers(0, n // 2 + 1)), replace=False).astype(np.int64)
        free = bool(rng.integers(2))
        free_records.mark(bits, records, free)
        ref[records] = free
        np.testing.assert_array_equal(free_records.is_free(bits, np.arange(n)), ref)
        start = int(rng.integers(0, n))
        end = int(rng.integers(start, n + 1))
        out = np.full(int(rng.integers(1, n + 1)), -1, np.int64)
        k, stop = free_records.scan(bits, start, end, out)
        want = start + np.flatnonzero(ref[start:end])[: out.shape[0]]
        np.testing.assert_array_equal(out[:k], want)
        # the scan stops one past its last record when it has enough, else at the end
        assert stop == (int(want[-1]) + 1 if k == out.shape[0] else end)


def test_a_scan_passes_whole_bytes_with_no_free_record() -> None:
    bits = np.zeros(free_records.bits_for(1_000), np.uint8)
    free_records.mark(bits, np.array([3, 517, 998], np.int64), True)
    out = np.empty(3, np.int64)
    assert free_records.scan(bits, 4, 1_000, out)[0] == 2
    np.testing.assert_array_equal(out[:2], [517, 998])
