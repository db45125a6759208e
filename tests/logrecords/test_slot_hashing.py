"""Slot hashing: the slot is in every id, so equal text in different slots never collides."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from logrecords.hashing import SLOT_SHIFT, hash_strings, slot_of
from logrecords.schema_config import HashKind


@settings(max_examples=50, deadline=None)
@given(st.lists(st.text(min_size=0, max_size=20), min_size=1, max_size=50), st.integers(0, 254))
def test_equal_strings_in_different_slots_never_collide(values: list[str], slot: int) -> None:
    a, ok_a = hash_strings(values, slot_id=slot, kind=HashKind.FNV1A)
    b, ok_b = hash_strings(values, slot_id=slot + 1, kind=HashKind.FNV1A)
    assert ok_a.all() and ok_b.all()
    assert set(a.tolist()).isdisjoint(b.tolist())
    assert (slot_of(a) == slot).all() and (slot_of(b) == slot + 1).all()
    again, _ = hash_strings(values, slot_id=slot, kind=HashKind.FNV1A)
    assert np.array_equal(a, again)  # deterministic


def test_fnv_spreads_similar_strings() -> None:
    ids, _ = hash_strings([f"user{i}" for i in range(100_000)], slot_id=3, kind=HashKind.FNV1A)
    assert len(np.unique(ids)) == 100_000
    low = ids & np.uint64((1 << SLOT_SHIFT) - 1)
    # Avalanche: the top and bottom halves of the 56-bit hash are both used.
    assert len(np.unique(low >> np.uint64(48))) > 200 and len(np.unique(low & np.uint64(0xFF))) == 256


def test_hex_and_int_are_lossless_and_validated() -> None:
    ids, ok = hash_strings(["0", "ff", "DEADbeef", "ffffffffffffff", "xyz", "", "fffffffffffffff"], slot_id=2,
                           kind=HashKind.HEX)
    assert ok.tolist() == [True, True, True, True, False, False, False]
    base = 2 << SLOT_SHIFT
    assert ids[:4].tolist() == [base, base | 0xFF, base | 0xDEADBEEF, base | (2**56 - 1)]
    ids, ok = hash_strings(["0", "42", str(2**56 - 1), str(2**56), "-1", "1.5"], slot_id=0, kind=HashKind.INT)
    assert ok.tolist() == [True, True, True, False, False, False]
    assert ids[:3].tolist() == [0, 42, 2**56 - 1]


def test_unicode_text_hashes_by_utf8_bytes() -> None:
    a, _ = hash_strings(["café"], slot_id=1, kind=HashKind.FNV1A)
    b, _ = hash_strings(["cafe"], slot_id=1, kind=HashKind.FNV1A)
    assert a[0] != b[0]
