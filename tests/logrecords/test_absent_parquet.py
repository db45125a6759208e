"""Fields a Parquet file lacks (a null, or a column the file does not have) counted and refused as JSON's are."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from core.errors import InvalidInput
from logrecords.file_formats import FileReader
from logrecords.rejects import Rejected, RejectReason
from logrecords.schema_config import SchemaConfig

SCHEMA = SchemaConfig.model_validate({
    "format": "parquet", "label": "click", "item_id": "item",
    "slots": [
        {"name": "price", "kind": "dense"}, {"name": "year", "kind": "dense"},
        {"name": "item", "kind": "sparse", "hash": "int"}, {"name": "tags", "kind": "sparse", "optional": True},
    ],
})


def read(path: Path, batch_size: int = 1000) -> tuple[int, list[Rejected]]:
    kept, rejected = 0, []
    for block in FileReader(SCHEMA).blocks(path, batch_size):
        batch, rej, _ = block.parse()
        kept += len(batch)
        rejected += rej
    return kept, rejected


def test_a_few_nulls_are_trained_with_the_default(tmp_path: Path) -> None:
    n = 200
    path = tmp_path / "a.parquet"
    pq.write_table(pa.table({
        "click": [1] * n, "price": [None if i % 5 == 0 else 1.0 for i in range(n)], "year": [1999] * n,
        "item": list(range(n)), "tags": pa.nulls(n, pa.string()),
    }), path)
    kept, rejected = read(path)
    assert kept == n and not rejected


def test_a_missing_column_is_refused_naming_the_field(tmp_path: Path) -> None:
    n = 300
    path = tmp_path / "b.parquet"
    pq.write_table(pa.table({"click": [1] * n, "price": [2.0] * n, "item": list(range(n))}), path)
    kept, rejected = read(path, batch_size=50)
    # the first block is read before min_absent_records records: it decides nothing and trains
    assert SCHEMA.min_absent_records == 100 and kept == 50 and len(rejected) == n - 50
    assert {r.reason for r in rejected} == {RejectReason.ABSENT_FIELD}
    assert "field 'year'" in rejected[0].detail and b'"item"' in rejected[0].raw


def test_the_label_column_stays_required(tmp_path: Path) -> None:
    path = tmp_path / "c.parquet"
    pq.write_table(pa.table({"price": [2.0], "item": [1]}), path)
    with pytest.raises(InvalidInput, match="click"):
        read(path)
