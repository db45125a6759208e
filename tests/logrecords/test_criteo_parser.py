"""Criteo TSV parsing: values equal a plain-Python reading of the line; bad lines rejected with reasons."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logrecords.criteo import CriteoParser
from logrecords.rejects import RejectReason

SLOT_SHIFT = 56


def line(label: str = "1", dense: list[str] | None = None, cats: list[str] | None = None) -> bytes:
    dense = dense if dense is not None else [str(i) for i in range(13)]
    cats = cats if cats is not None else [f"{i:08x}" for i in range(26)]
    return "\t".join([label, *dense, *cats]).encode()


def reference(raw: bytes) -> tuple[float, list[float], dict[str, list[int]]]:
    f = raw.decode().rstrip("\r\n").split("\t")
    dense = [float(x) if x else 0.0 for x in f[1:14]]
    slots = {f"C{j + 1}": ([(j << SLOT_SHIFT) | int(x, 16)] if x else []) for j, x in enumerate(f[14:])}
    return float(f[0]), dense, slots


dense_field = st.one_of(st.just(""), st.integers(-(10**6), 10**6).map(str))
cat_field = st.one_of(st.just(""), st.integers(0, 2**32 - 1).map(lambda v: f"{v:08x}"))
row = st.builds(
    line,
    st.sampled_from(["0", "1"]),
    st.lists(dense_field, min_size=13, max_size=13),
    st.lists(cat_field, min_size=26, max_size=26),
)


@pytest.mark.slow
@settings(max_examples=30, deadline=None)
@given(st.lists(row, min_size=1, max_size=40))
def test_parsed_values_equal_reference(rows: list[bytes]) -> None:
    batch, rejected = CriteoParser().parse(rows)
    assert rejected == []
    assert len(batch) == len(rows)
    for i, raw in enumerate(rows):
        label, dense, slots = reference(raw)
        assert batch.labels[i] == label
        assert batch.dense[i].tolist() == np.array(dense, dtype=np.float32).tolist()
        for name, ids in slots.items():
            assert batch.slot_ids(name, i).tolist() == ids


def test_empty_fields_and_line_endings() -> None:
    raw = line("0", [""] * 13, [""] * 25 + ["ABCDEF01"]) + b"\r\n"
    batch, rejected = CriteoParser().parse([raw])
    assert rejected == []
    assert batch.dense.tolist() == [[0.0] * 13]
    assert all(batch.slots[f"C{j}"][1].tolist() == [0, 0] for j in range(1, 26))
    assert batch.slot_ids("C26", 0).tolist() == [(25 << SLOT_SHIFT) | 0xABCDEF01]


def test_each_bad_kind_is_rejected_with_reason_and_the_rest_kept() -> None:
    good = line()
    bad = {
        RejectReason.FIELD_COUNT: line(cats=["a"] * 25),
        RejectReason.BAD_DENSE: line(dense=["1", "2", "x3", *["0"] * 10]),
        RejectReason.BAD_HEX: line(cats=["0123abcg", *["1"] * 25]),
        RejectReason.BAD_LABEL: line(label="yes"),
        RejectReason.OVERSIZED: line(cats=["a" * 14] * 26),
    }
    parser = CriteoParser(max_message_bytes=300)
    records = [good, *bad.values(), good]
    batch, rejected = parser.parse(records)
    assert len(batch) == 2
    assert [r.reason for r in rejected] == list(bad)
    assert [r.index for r in rejected] == [1, 2, 3, 4, 5]
    assert [r.raw for r in rejected] == list(bad.values())
    details = {r.reason: r.detail for r in rejected}
    assert "got 39" in details[RejectReason.FIELD_COUNT]
    assert "I3" in details[RejectReason.BAD_DENSE] and "x3" in details[RejectReason.BAD_DENSE]
    assert "C1" in details[RejectReason.BAD_HEX]
    assert "300" in details[RejectReason.OVERSIZED]


def test_user_and_item_columns_follow_their_slots() -> None:
    from logrecords.schema_config import SchemaConfig

    parser = CriteoParser(SchemaConfig.criteo(user_id="C1", item_id="C2"))
    batch, _ = parser.parse([line(cats=["ff", "", *["1"] * 24])])
    assert batch.user_id.tolist() == [0xFF]
    assert batch.item_id.tolist() == [0]  # absent


def test_empty_batch() -> None:
    batch, rejected = CriteoParser().parse([])
    assert len(batch) == 0 and rejected == []
    assert batch.slots["C1"][1].tolist() == [0]


noise = st.lists(st.sampled_from([b"\t", b"0", b"1", b"-", b".", b"a", b"f", b"g", b"\n", b"\r", b" ", b"\xff"]),
                 max_size=60).map(b"".join)


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(row, noise, row.map(lambda r: r.replace(b"\t", b"\tz", 1))), max_size=30))
def test_any_bytes_are_either_parsed_or_rejected_never_lost(records: list[bytes]) -> None:
    batch, rejected = CriteoParser(max_message_bytes=400).parse(records)
    assert len(batch) + len(rejected) == len(records)
    assert all(records[r.index] == r.raw and r.detail for r in rejected)
    assert len({r.index for r in rejected}) == len(rejected)


def test_fast_paths_hand_every_unusual_field_to_the_general_one() -> None:
    """8-digit hex ids and plain integers are parsed in the scan that finds their end; an id of
    another length, a bad digit, a sign, a decimal point or a last field before "\\r\\n" must read
    as the general path reads them."""
    cats = [f"{i:08x}" for i in range(26)]
    cats[0], cats[1], cats[2], cats[3] = "ABCDEF01", "abc", "123456789", "0000000g"
    dense = ["-3", "2.5", "007", "", "4294967296", "12x", *[str(i) for i in range(7)]]
    ok = line("1", dense[:5] + [str(i) for i in range(8)], cats[:3] + cats[4:] + ["ffffffff"])
    batch, rejected = CriteoParser().parse([ok + b"\r\n"])
    assert rejected == []
    _, want_dense, slots = reference(ok)
    assert batch.dense[0].tolist() == np.array(want_dense, dtype=np.float32).tolist()
    for name, ids in slots.items():
        assert batch.slot_ids(name, 0).tolist() == ids
    bad_dense = line("0", ["12x", *dense[6:], "1", "2", "3", "4", "5"], [f"{i:08x}" for i in range(26)])
    _, rejected = CriteoParser().parse([line("1", dense[:5] + dense[6:] + ["1"], cats), bad_dense])
    assert [(r.index, r.reason) for r in rejected] == [(0, RejectReason.BAD_HEX), (1, RejectReason.BAD_DENSE)]
