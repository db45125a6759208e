"""A row store's growth gives the old columns' pages back as it copies them, never under a
view that still reads them."""

from __future__ import annotations

import numpy as np

from tables.rows import MOVE_CHUNK, RowStore


def filled(n: int) -> RowStore:
    rows = RowStore({"params": 3, "state": 6, "wide_state": 1}, n)
    rows.n = n
    rng = np.random.default_rng(0)
    for col in rows.cols.values():
        col[...] = rng.integers(0, 1 << 20, col.shape).astype(col.dtype)
    return rows


def test_growth_keeps_every_row_and_a_live_view_keeps_its_values() -> None:
    n = 3 * MOVE_CHUNK + 17  # several chunks and a part of one
    rows = filled(n)
    before = {name: col[:n].copy() for name, col in rows.cols.items()}
    view = rows.cols["state"][: n // 2]  # held by a caller across the growth: its pages must stay
    rows.resize(4 * n)
    assert rows.capacity == 4 * n
    for name, col in rows.cols.items():
        np.testing.assert_array_equal(col[:n], before[name], err_msg=name)
    np.testing.assert_array_equal(view, before["state"][: n // 2])
