"""JSON-lines parsing under a declared schema."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logrecords.batch import Batch
from logrecords.hashing import hash_strings
from logrecords.json_lines import JsonLinesParser
from logrecords.rejects import RejectReason
from logrecords.schema_config import HashKind, SchemaConfig, SlotConfig, SlotKind

SCHEMA = SchemaConfig(
    format="json",
    slots=(
        SlotConfig(name="price", kind=SlotKind.DENSE),
        SlotConfig(name="age", kind=SlotKind.DENSE),
        SlotConfig(name="user", kind=SlotKind.SPARSE, hash=HashKind.FNV1A),
        SlotConfig(name="item", kind=SlotKind.SPARSE, hash=HashKind.INT),
        SlotConfig(name="tags", kind=SlotKind.SPARSE),
    ),
    event_time="ts",
    user_id="user",
    item_id="item",
)


def enc(**rec: object) -> bytes:
    return json.dumps(rec).encode()


def test_multi_valued_slots_become_ragged_columns() -> None:
    ids = SCHEMA.slot_ids()
    rows = [
        enc(label=1, price=2.5, age=30, user="u1", item=7, tags=["a", "b", "c"], ts=10.0),
        enc(label=0, user="u2", item=8, tags="d"),
        enc(label=1, price=1, user="u1", tags=[]),
    ]
    batch, rejected = JsonLinesParser(SCHEMA).parse(rows)
    assert rejected == []
    assert batch.labels.tolist() == [1, 0, 1]
    assert batch.dense.tolist() == [[2.5, 30.0], [0.0, 0.0], [1.0, 0.0]]
    values, offsets = batch.slots["tags"]
    assert offsets.tolist() == [0, 3, 4, 4]
    expected, _ = hash_strings(["a", "b", "c", "d"], slot_id=ids["tags"], kind=HashKind.FNV1A)
    assert values.tolist() == expected.tolist()
    assert batch.user_id[0] == batch.user_id[2] != batch.user_id[1]
    assert batch.item_id.tolist() == [(ids["item"] << 56) | 7, (ids["item"] << 56) | 8, 0]
    assert batch.event_time[0] == 10.0 and np.isnan(batch.event_time[1])


def test_bad_records_are_rejected_and_good_ones_kept() -> None:
    rows = [
        enc(label=1, user="ok"),
        b"{not json",
        b"\xff\xfe",
        b"42",
        enc(price=1.0),
        enc(label=0.5, price="cheap"),
        enc(label=1, item="seven"),
        enc(label=1, item=-3),
        enc(label=1, tags=[{"nested": 1}]),
        enc(label=1, ts="yesterday"),
        b'{"label": 1, "tags": ["\\ud800", "caf\\u00e9"]}',
        enc(label=0, user="ok2"),
    ]
    batch, rejected = JsonLinesParser(SCHEMA).parse(rows)
    assert batch.labels.tolist() == [1.0, 1.0, 0.0]  # in input order, json.loads' records among the kernel's
    got = [(r.index, r.reason) for r in rejected]
    assert got == [
        (1, RejectReason.INVALID_JSON),
        (2, RejectReason.INVALID_JSON),
        (3, RejectReason.SCHEMA),
        (4, RejectReason.BAD_LABEL),
        (5, RejectReason.BAD_DENSE),
        (6, RejectReason.BAD_INT),
        (7, RejectReason.BAD_INT),
        (8, RejectReason.BAD_TEXT),
        (9, RejectReason.SCHEMA),
    ]
    # A lone surrogate is valid JSON; it hashes like any text (and "\u00e9" like "é").
    cafe = hash_strings(["café"], slot_id=SCHEMA.slot_ids()["tags"], kind=HashKind.FNV1A)[0][0]
    assert batch.slot_ids("tags", 1).tolist()[1] == cafe  # row 1: the input's second kept record
    assert all(r.raw == rows[r.index] for r in rejected)
    assert "price" in rejected[4].detail


def test_oversized_is_rejected_before_decoding() -> None:
    batch, rejected = JsonLinesParser(SCHEMA, max_message_bytes=100).parse([enc(label=1, tags=["x" * 200])])
    assert len(batch) == 0 and [r.reason for r in rejected] == [RejectReason.OVERSIZED]


def canonical_rows(batch: Batch) -> list[tuple]:
    rows = []
    for i in range(len(batch)):
        slots = tuple(tuple(batch.slot_ids(name, i).tolist()) for name in sorted(batch.slots))
        t = float(batch.event_time[i]) if batch.event_time is not None else 0.0
        rows.append((float(batch.labels[i]), tuple(batch.dense[i].tolist()), slots, -np.inf if np.isnan(t) else t))
    return sorted(rows)


scalar = st.one_of(
    st.none(), st.booleans(), st.integers(-(10**20), 10**20), st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=6), st.sampled_from(['a"b', "é", "ff", "12", "x\ny"]),
)
value = st.one_of(scalar, st.lists(scalar, max_size=4), st.dictionaries(st.text(max_size=3), scalar, max_size=2))
keys = st.sampled_from(["label", "price", "age", "user", "item", "tags", "ts", "other"])
record = st.dictionaries(keys, value, max_size=8).map(lambda d: {"label": 1, **d} if len(d) % 3 else d)


def render(rec: dict, style: int) -> bytes:
    text = json.dumps(rec, separators=(",", ":") if style % 2 else (", ", ": "), ensure_ascii=style % 3 == 0)
    return text.encode() if style % 5 else b"  " + text.encode() + b"\n"


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(record, st.integers(0, 29)), min_size=1, max_size=12),
       st.lists(st.sampled_from([b"{", b'{"label":1,}', b'{"label":1}x', b'{"label": 01}', b'{"label":1e0}',
                                 b'{"label":1,"label":0}', b"{}", b'{"tags":[1,]}', b'{"label":1,"tags":[1 2]}',
                                 b'{"label":NaN}', b'{"label":-0,"item":-0}', b'{"label":0.5,"ts":1.5E9}']),
                max_size=4))
def test_fast_path_equals_reference_path(recs: list[tuple[dict, int]], odd: list[bytes]) -> None:
    rows = [render(rec, style) for rec, style in recs] + odd
    parser = JsonLinesParser(SCHEMA, max_message_bytes=400)
    fast, fast_rej = parser.parse(rows)
    ref, ref_rej = parser.parse_reference(rows)
    assert [(r.index, r.reason, r.detail, r.raw) for r in fast_rej] == [
        (r.index, r.reason, r.detail, r.raw) for r in ref_rej
    ]
    assert canonical_rows(fast) == canonical_rows(ref)


json_noise = st.lists(st.sampled_from([b"{", b"}", b"[", b"]", b'"', b":", b",", b"label", b"tags", b"1", b"-", b".5",
                                       b"e", b"null", b"true", b" ", b"\\", b"\xc3", b"\xa9", b"\xed\xa0\x80",
                                       b'{"tags":"', b'"}', "é€😀".encode()]), max_size=25).map(b"".join)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(st.lists(json_noise, min_size=1, max_size=10))
def test_fast_path_equals_reference_on_noise(rows: list[bytes]) -> None:
    parser = JsonLinesParser(SCHEMA)
    fast, fast_rej = parser.parse(rows)
    ref, ref_rej = parser.parse_reference(rows)
    assert len(fast) + len(fast_rej) == len(rows)
    assert [(r.index, r.reason, r.detail) for r in fast_rej] == [(r.index, r.reason, r.detail) for r in ref_rej]
    assert canonical_rows(fast) == canonical_rows(ref)
