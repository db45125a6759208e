"""The fast row encoder writes JSON that parses back to bit-identical float32 values."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from service.json_rows import rows_json

FINITE32 = st.floats(width=32, allow_nan=False, allow_infinity=False)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(hnp.arrays(np.float32, st.tuples(st.integers(0, 5), st.integers(1, 6)), elements=FINITE32))
def test_rows_round_trip_bit_exact(rows: np.ndarray) -> None:
    back = np.array(json.loads(rows_json(rows)), np.float32).reshape(rows.shape)
    assert np.array_equal(back.view(np.uint32), rows.view(np.uint32))


def test_edges_and_non_finite() -> None:
    info = np.finfo(np.float32)
    rows = np.array([[0.0, -0.0, 1.0, 0.1, info.max, -info.max, info.tiny, 1e-45, 123456789.0, 1e10]], np.float32)
    back = np.array(json.loads(rows_json(rows)), np.float32)
    assert np.array_equal(back.view(np.uint32), rows.view(np.uint32))
    assert json.loads(rows_json(np.array([[np.nan, np.inf]], np.float32))) == [[None, None]]
    assert rows_json(np.empty((0, 4), np.float32)) == b"[]"
