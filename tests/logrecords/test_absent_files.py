"""Fields a CSV or Parquet file lacks counted and refused as JSON's are: an empty CSV cell or a row shorter
than the header, a Parquet null or a column the file does not have."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from core.errors import InvalidInput
from logrecords.csv_lines import CsvLinesParser
from logrecords.file_formats import FileReader
from logrecords.rejects import Rejected, RejectReason
from logrecords.schema_config import SchemaConfig

SLOTS = [
    {"name": "price", "kind": "dense"}, {"name": "year", "kind": "dense"},
    {"name": "item", "kind": "sparse", "hash": "int"}, {"name": "tags", "kind": "sparse", "optional": True},
]
PARQUET = SchemaConfig.model_validate({"format": "parquet", "label": "click", "item_id": "item", "slots": SLOTS})
CSV = SchemaConfig.model_validate({"format": "csv", "label": "click", "event_time": "ts", "item_id": "item",
                                   "slots": SLOTS})
HEADER = ("click", "ts", "price", "item", "tags", "year")


def read(path: Path, schema: SchemaConfig, batch_size: int = 1000) -> tuple[int, list[Rejected]]:
    kept, rejected = 0, []
    for block in FileReader(schema).blocks(path, batch_size):
        batch, rej, _ = block.parse()
        kept += len(batch)
        rejected += rej
    return kept, rejected


def test_both_parse_paths_report_empty_cells_and_short_rows_as_absent() -> None:
    lines = [b"1,1.7e9,2.5,7,a,1999", b"1,1700000000,,7,,1999", b"0,,2.5,3", b"1,1700000000,2.5,7,a,1999,9"]
    parser = CsvLinesParser(CSV, header=HEADER)
    fast, rej_fast = parser.parse(lines)
    slow, rej_slow = parser.parse_reference(lines)
    assert CSV.presence_fields == ["price", "year", "ts", "item", "tags"]
    want = np.array([[0, 0, 0, 0, 0], [1, 0, 0, 0, 1], [0, 1, 1, 0, 1]], dtype=bool)
    np.testing.assert_array_equal(fast.absent, want)
    np.testing.assert_array_equal(slow.absent, want)
    assert [(r.index, r.reason) for r in rej_fast] == [(r.index, r.reason) for r in rej_slow] == \
        [(3, RejectReason.FIELD_COUNT)]  # a longer row is still refused


def test_a_few_empty_cells_train_and_a_missing_field_is_refused_naming_it(tmp_path: Path) -> None:
    few = tmp_path / "few.csv"
    rows = [f"1,1700000000,{'' if i % 5 == 0 else 2.5},{i},a,1999" for i in range(200)]
    few.write_text("\n".join([",".join(HEADER), *rows]) + "\n")
    assert read(few, CSV) == (200, [])

    short = tmp_path / "short.csv"  # every row stops before 'year'
    short.write_text("\n".join([",".join(HEADER), *(f"1,1700000000,2.5,{i},a" for i in range(300))]) + "\n")
    kept, rejected = read(short, CSV, 50)
    # the blocks read before min_absent_records records (49 rows, the header being the first line, then 50)
    # decide nothing and train
    assert CSV.min_absent_records == 100 and kept == 99 and len(rejected) == 201
    assert {r.reason for r in rejected} == {RejectReason.ABSENT_FIELD}
    assert "field 'year'" in rejected[0].detail and rejected[0].raw == b"1,1700000000,2.5,99,a"


def test_a_few_nulls_are_trained_with_the_default(tmp_path: Path) -> None:
    n = 200
    path = tmp_path / "a.parquet"
    pq.write_table(pa.table({
        "click": [1] * n, "price": [None if i % 5 == 0 else 1.0 for i in range(n)], "year": [1999] * n,
        "item": list(range(n)), "tags": pa.nulls(n, pa.string()),
    }), path)
    kept, rejected = read(path, PARQUET)
    assert kept == n and not rejected


def test_a_missing_column_is_refused_naming_the_field(tmp_path: Path) -> None:
    n = 300
    path = tmp_path / "b.parquet"
    pq.write_table(pa.table({"click": [1] * n, "price": [2.0] * n, "item": list(range(n))}), path)
    kept, rejected = read(path, PARQUET, 50)
    # the first block is read before min_absent_records records: it decides nothing and trains
    assert PARQUET.min_absent_records == 100 and kept == 50 and len(rejected) == n - 50
    assert {r.reason for r in rejected} == {RejectReason.ABSENT_FIELD}
    assert "field 'year'" in rejected[0].detail and b'"item"' in rejected[0].raw


def test_the_label_column_stays_required(tmp_path: Path) -> None:
    path = tmp_path / "c.parquet"
    pq.write_table(pa.table({"price": [2.0], "item": [1]}), path)
    with pytest.raises(InvalidInput, match="click"):
        read(path, PARQUET)
