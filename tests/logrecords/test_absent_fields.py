"""Fields a JSON record lacks: reported per record by both parse paths, counted per required field,
and refused past the schema's share with a reason naming the field."""

from __future__ import annotations

import json

import numpy as np

from logrecords.json_lines import JsonLinesParser
from logrecords.parsers import make_parser
from logrecords.rejects import RejectReason
from logrecords.schema_config import SchemaConfig

SCHEMA = SchemaConfig.model_validate({
    "format": "json", "label": "click", "event_time": "ts", "item_id": "item",
    "slots": [
        {"name": "price", "kind": "dense"}, {"name": "year", "kind": "dense"},
        {"name": "item", "kind": "sparse", "hash": "int"}, {"name": "tags", "kind": "sparse", "optional": True},
    ],
})
MIN_RECORDS = SCHEMA.min_absent_records


def line(**fields: object) -> bytes:
    record = {"click": 1, "ts": 1.7e9, "price": 2.5, "year": 1999, "item": 7, "tags": ["a"], **fields}
    return json.dumps(record).encode()


def test_both_parse_paths_report_the_same_absent_fields() -> None:
    lines = [line(), line(year=None), line(tags=[]), json.dumps({"click": 0, "item": 3}).encode()]
    # an escaped string sends a record down the reference path; the same records must read alike
    escaped = [v.replace(b'"click"', b'"\\u0063lick"') for v in lines]
    parser = JsonLinesParser(SCHEMA)
    fast, _ = parser.parse(lines)
    slow, _ = parser.parse(escaped)
    assert SCHEMA.presence_fields == ["price", "year", "ts", "item", "tags"]
    want = np.array([[0, 0, 0, 0, 0], [0, 1, 0, 0, 0], [0, 0, 0, 0, 0], [1, 1, 1, 0, 1]], dtype=bool)
    np.testing.assert_array_equal(fast.absent, want)
    np.testing.assert_array_equal(slow.absent, want)


def test_a_few_absences_are_counted_and_trained_with_the_default() -> None:
    parser = make_parser(SCHEMA)
    batch, rejected = parser.parse([line(year=None) if i % 5 == 0 else line() for i in range(200)])
    assert not rejected and len(batch) == 200
    assert parser.check.absent == {"year": 40}
    assert float(batch.dense[0, 1]) == 0.0


def test_a_field_most_records_lack_is_refused_naming_it() -> None:
    parser = make_parser(SCHEMA)
    lines = [json.dumps({"click": 1, "ts": 1.7e9, "price": 1.0, "item": i}).encode() for i in range(MIN_RECORDS)]
    lines[3] = line()  # has every field: kept
    batch, rejected = parser.parse(lines)
    assert len(batch) == 1 and len(rejected) == MIN_RECORDS - 1
    assert {r.reason for r in rejected} == {RejectReason.ABSENT_FIELD}
    assert "field 'year': absent" in rejected[0].detail and rejected[0].raw == lines[0]
    assert parser.check.absent == {"year": MIN_RECORDS - 1}  # tags is optional: never counted


def test_a_share_of_one_never_refuses() -> None:
    parser = make_parser(SCHEMA.model_copy(update={"max_absent_share": 1.0}))
    batch, rejected = parser.parse([line(year=None)] * MIN_RECORDS)
    assert not rejected and len(batch) == MIN_RECORDS
    assert parser.check.absent == {"year": MIN_RECORDS}
