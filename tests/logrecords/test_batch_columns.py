"""Batch: ragged gather and concatenation keep every record's ids together."""

from __future__ import annotations

import numpy as np

from logrecords.batch import Batch, concat_batches


def make(n: int, start: int, positions: dict[int, tuple[int, int]]) -> Batch:
    lengths = np.arange(n) % 3
    offsets = np.r_[0, np.cumsum(lengths)].astype(np.int64)
    values = np.concatenate([np.full(k, start + i, dtype=np.uint64) for i, k in enumerate(lengths)])
    return Batch(
        labels=np.arange(start, start + n, dtype=np.float32),
        dense=np.arange(start, start + n, dtype=np.float32)[:, None],
        slots={"s": (values, offsets)},
        user_id=np.arange(start, start + n, dtype=np.uint64),
        positions=positions,
    )


def test_take_and_concat_keep_rows_whole() -> None:
    a, b = make(5, 0, {0: (10, 14)}), make(4, 100, {0: (15, 18), 1: (0, 3)})
    both = concat_batches([a, b])
    assert len(both) == 9 and both.positions == {0: (10, 18), 1: (0, 3)}
    rows = np.array([8, 0, 4, 5])
    picked = both.take(rows)
    for out_row, src in enumerate(rows):
        label = int(both.labels[src])
        assert picked.labels[out_row] == label and picked.user_id[out_row] == label
        assert picked.slot_ids("s", out_row).tolist() == [label] * (label % 100 % 3)
    assert picked.slots["s"][1][0] == 0 and picked.slots["s"][1][-1] == picked.slots["s"][0].shape[0]
