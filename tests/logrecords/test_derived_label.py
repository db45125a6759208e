"""A label derived from a numeric field (``label: {field: rating, at_least: 4}``): a 1-5 rating is
the label 1 from 4 up, alike in JSON (kernel and reference path), CSV and Parquet; a record whose
rating is no number is refused naming the field; Criteo records keep their 0/1 label."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pydantic import ValidationError

from logrecords.csv_lines import CsvLinesParser
from logrecords.file_formats import FileReader
from logrecords.json_lines import JsonLinesParser
from logrecords.rejects import RejectReason
from logrecords.schema_config import SchemaConfig

SCHEMA = SchemaConfig.model_validate({
    "format": "json", "label": {"field": "rating", "at_least": 4},
    "slots": [{"name": "movie", "kind": "sparse", "hash": "int"}],
})
RATINGS = [1, 5, 4, 3.5, 2, 4.0]
WANT = np.array([0, 1, 1, 0, 0, 1], dtype=np.float32)


def test_json_ratings_become_labels_on_both_parse_paths() -> None:
    lines = [json.dumps({"rating": r, "movie": i}).encode() for i, r in enumerate(RATINGS)]
    parser = JsonLinesParser(SCHEMA)
    fast, rejected = parser.parse(lines)
    assert not rejected
    np.testing.assert_array_equal(fast.labels, WANT)
    slow, _ = parser.parse([v.replace(b'"movie"', b'"\\u006dovie"') for v in lines])  # escapes: reference path
    np.testing.assert_array_equal(slow.labels, WANT)


def test_a_rating_that_is_no_number_is_refused_naming_the_field() -> None:
    parser = JsonLinesParser(SCHEMA)
    for bad in (b'{"rating": "five", "movie": 1}', b'{"movie": 1}', b'{"rating": "five", "movie": "\\u0031"}'):
        batch, rejected = parser.parse([bad])
        assert len(batch) == 0 and rejected[0].reason is RejectReason.BAD_LABEL
        assert "field 'rating'" in rejected[0].detail and "rating >= 4" in rejected[0].detail


def test_csv_and_parquet_derive_the_same_labels(tmp_path: Path) -> None:
    csv_schema = SCHEMA.model_copy(update={"format": "csv"})
    batch, rejected = CsvLinesParser(csv_schema, header=("rating", "movie")).parse(
        [f"{r},{i}".encode() for i, r in enumerate(RATINGS)])
    assert not rejected
    np.testing.assert_array_equal(batch.labels, WANT)
    path = tmp_path / "ratings.parquet"
    pq.write_table(pa.table({"rating": pa.array(RATINGS, pa.float64()), "movie": list(range(len(RATINGS)))}), path)
    (block,) = FileReader(SCHEMA).blocks(path, 100)
    batch, rejected, _ = block.parse()
    assert not rejected
    np.testing.assert_array_equal(batch.labels, WANT)


def test_a_plain_label_still_must_lie_in_0_1_and_criteo_takes_no_rule() -> None:
    plain = SCHEMA.model_copy(update={"label": "rating"})
    batch, rejected = JsonLinesParser(plain).parse([b'{"rating": 4, "movie": 1}', b'{"rating": 1, "movie": 2}'])
    assert len(batch) == 1 and "in [0, 1]" in rejected[0].detail
    with pytest.raises(ValidationError, match="derived label"):
        SchemaConfig.model_validate({**SchemaConfig.criteo().model_dump(), "label": {"field": "y", "at_least": 1}})
