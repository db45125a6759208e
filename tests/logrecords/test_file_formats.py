"""JSON lines, CSV and Parquet files under one schema section parse to the same batch; bad records
are rejected with reasons, counted by the file dataset and traced to ``path:line``."""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from core.errors import ConfigError, InvalidInput
from logrecords.csv_lines import CsvLinesParser
from logrecords.file_formats import FileReader, format_of, schema_for_file
from logrecords.parquet_reader import ParquetReader
from logrecords.parsers import make_parser
from logrecords.rejects import RejectReason
from logrecords.schema_config import SchemaConfig
from streaming.dead_letter import DeadLetters
from streaming.file_dataset import FileDataset

SCHEMA = SchemaConfig.model_validate({
    "format": "json", "label": "click", "event_time": "ts", "user_id": "user", "item_id": "item",
    "slots": [
        {"name": "price", "kind": "dense"}, {"name": "age", "kind": "dense"},
        {"name": "user", "kind": "sparse", "hash": "int"}, {"name": "item", "kind": "sparse", "hash": "int"},
        {"name": "city", "kind": "sparse"}, {"name": "tags", "kind": "sparse", "separator": "|"},
    ],
})
COLUMNS = ["click", "ts", "price", "age", "user", "item", "city", "tags", "unused"]
CITIES = ["Paris", "São Paulo", "a,b", 'say "hi"', "x y", "東京"]


def records(n: int, seed: int = 0) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    out = []
    for k in range(n):
        out.append({
            "click": rng.randint(0, 1), "ts": 1_700_000_000 + k + rng.randint(0, 999) / 1000,
            "price": None if rng.random() < 0.1 else round(rng.uniform(-50, 500), 2),
            "age": rng.randint(15, 90), "user": rng.randint(0, 10**12), "item": rng.randint(0, 999),
            "city": None if rng.random() < 0.1 else rng.choice(CITIES),
            "tags": rng.sample(["a", "b", "c", "dd", "e"], rng.randint(0, 3)), "unused": "z",
        })
    return out


def write_jsonl(path: Path, recs: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in recs))
    return path


def write_csv(path: Path, recs: list[dict[str, Any]]) -> Path:
    with open(path, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(COLUMNS)
        for r in recs:
            row = dict(r, tags="|".join(r["tags"]))
            w.writerow(["" if row[c] is None else row[c] for c in COLUMNS])
    return path


def write_parquet(path: Path, recs: list[dict[str, Any]], row_group: int = 300) -> Path:
    table = pa.table({c: [r[c] for r in recs] for c in COLUMNS})
    pq.write_table(table, path, row_group_size=row_group)
    return path


def canon(batch: Any) -> dict[str, list]:
    """Rows ordered by event time (each parser may put its slow-path records last)."""
    order = np.argsort(batch.event_time, kind="stable")
    b = batch.take(order)
    out = {"labels": b.labels.tolist(), "dense": b.dense.tolist(), "user_id": b.user_id.tolist(),
           "item_id": b.item_id.tolist(), "ts": [None if t != t else t for t in b.event_time.tolist()]}
    for name in sorted(b.slots):
        out[name] = [b.slot_ids(name, i).tolist() for i in range(len(b))]
    return out


def load(path: Path, schema: SchemaConfig = SCHEMA, batch_size: int = 256) -> tuple[Any, DeadLetters]:
    dead = DeadLetters()
    return FileDataset([path], schema, batch_size=batch_size, dead_letters=dead).load(), dead


def test_json_csv_and_parquet_parse_to_the_same_batch(tmp_path: Path) -> None:
    recs = records(1000)
    want, dead = load(write_jsonl(tmp_path / "r.jsonl", recs))
    assert not dead.counts and len(want) == 1000
    for path in (write_csv(tmp_path / "r.csv", recs), write_parquet(tmp_path / "r.parquet", recs)):
        got, dead = load(path)
        assert not dead.counts, path
        assert canon(got) == canon(want), path.suffix
    # the list slot and the string slot: ids hashed from the same text in every format
    assert sum(len(r["tags"]) for r in recs) == len(want.slots["tags"][0])
    assert want.user_id.tolist()[:3] == [r["user"] for r in recs[:3]]  # int hash kind: lossless, slot id 0


def test_csv_kernel_and_reference_path_agree(tmp_path: Path) -> None:
    path = write_csv(tmp_path / "r.csv", records(400, seed=3))
    lines = path.read_bytes().splitlines()
    parser = CsvLinesParser(SCHEMA.model_copy(update={"format": "csv"}), header=COLUMNS)
    fast, rej_fast = parser.parse(lines[1:])
    slow, rej_slow = parser.parse_reference(lines[1:])
    assert not rej_fast and not rej_slow
    assert canon(fast) == canon(slow)


def test_malformed_csv_rows_are_rejected_with_reasons(tmp_path: Path) -> None:
    good = "1,1700000000,2.5,30,7,8,Paris,a|b,z"
    bad = {
        "1,1700000000,2.5,30,7,8,Paris,a|b,z,extra": (RejectReason.FIELD_COUNT, "expected 9 fields"),
        "2,1700000000,2.5,30,7,8,Paris,a|b,z": (RejectReason.BAD_LABEL, "field 'click'"),
        ",1700000000,2.5,30,7,8,Paris,a|b,z": (RejectReason.BAD_LABEL, "field 'click'"),
        "1,1700000000,abc,30,7,8,Paris,a|b,z": (RejectReason.BAD_DENSE, "field 'price'"),
        "1,soon,2.5,30,7,8,Paris,a|b,z": (RejectReason.SCHEMA, "field 'ts'"),
        "1,1700000000,2.5,30,-7,8,Paris,a|b,z": (RejectReason.BAD_INT, "slot 'user'"),
        '1,1700000000,2.5,30,7,8,"Paris,a|b,z': (RejectReason.SCHEMA, "malformed CSV"),
        "1,1700000000,x,30,-7,8,Paris,a|b,z": (RejectReason.BAD_DENSE, "field 'price'"),  # dense before sparse
    }
    lines = [",".join(COLUMNS), good, *bad, good, '1,1e3,2.5e1,30,7,8,"a ""b""",c,z']
    path = tmp_path / "bad.csv"
    path.write_text("\n".join(lines) + "\n")
    batch, dead = load(path)
    assert len(batch) == 3
    assert sorted(batch.event_time.tolist()) == [1000.0, 1.7e9, 1.7e9]
    assert batch.dense[:, 0].tolist().count(25.0) == 1  # the exponent went through the reference path
    assert sum(dead.counts.values()) == len(bad)
    reader = FileReader(SCHEMA)
    (block,) = list(reader.blocks(path, 100))
    _, rejected, sources = block.parse()
    for r, (text, (reason, detail)) in zip(rejected, bad.items(), strict=True):
        assert r.raw.decode() == text and r.reason is reason and detail in r.detail, (text, r)
    assert sources[0] == f"{path}:3"  # line 1 is the header, line 2 the first good row


def test_csv_header_must_name_the_schema_fields(tmp_path: Path) -> None:
    path = tmp_path / "h.csv"
    path.write_text("click,ts,price\n1,2,3\n")
    with pytest.raises(InvalidInput, match=r"h\.csv.*lack schema fields \['age', 'user'"):
        load(path)
    with pytest.raises(InvalidInput, match=r"schema\.columns"):
        make_parser(SCHEMA.model_copy(update={"format": "csv"}))
    with_columns = SchemaConfig.model_validate(SCHEMA.model_dump() | {"format": "csv", "columns": COLUMNS})
    batch, rejected = make_parser(with_columns).parse([b"1,1700000000,2.5,30,7,8,Paris,a|b,z"])
    assert len(batch) == 1 and not rejected and batch.user_id.tolist() == [7]


def test_parquet_type_mismatches_are_rejected_with_reasons(tmp_path: Path) -> None:
    n = 6
    base = {"click": [1, 0, 1, None, 1, 0], "ts": [1.0 * i for i in range(n)], "price": [1.5] * n, "age": [3] * n,
            "user": [1, 2, 3, 4, 5, 6], "item": [7] * n, "city": ["x"] * n, "tags": [["a"]] * n, "unused": [0] * n}
    table = pa.table(base | {
        "age": pa.array(["3", None, "3", "3", "3", "3"]),  # strings where numbers are expected
        "tags": pa.array([["a"], ["b"], ["c", None], ["a"], [], None]),  # a null inside a list
    })
    path = tmp_path / "t.parquet"
    pq.write_table(table, path)
    batch, dead = load(path)
    reader = ParquetReader(SCHEMA.model_copy(update={"format": "parquet"}))
    (first, rb), = list(reader.blocks(path, 100))
    got, rejected = reader.parse(rb)
    assert first == 1 and len(got) == len(batch) == 1  # row 1: age null = 0, nothing else wrong
    assert got.dense.tolist() == [[1.5, 0.0]]
    why = {r.index: (r.reason, r.detail) for r in rejected}
    assert why[0] == (RejectReason.BAD_DENSE, "field 'age': non-numeric dense value")
    assert why[3][0] is RejectReason.BAD_LABEL  # null label: first in schema order
    assert json.loads(rejected[0].raw)["age"] == "3"
    assert dead.counts == {"bad_dense": 4, "bad_label": 1}

    floats_as_ids = pa.table(base | {"click": [1] * n, "item": [7.0] * n})
    pq.write_table(floats_as_ids, path)
    dead = DeadLetters()
    assert list(FileDataset([path], SCHEMA, dead_letters=dead)) == []
    assert dead.counts == {"bad_int": n}
    pq.write_table(pa.table({k: v for k, v in base.items() if k != "city"}), path)
    got, _ = load(path)  # a column the file lacks is an absent field: counted, refused only past the share
    assert len(got) == n - 1 and got.absent[:, SCHEMA.presence_fields.index("city")].all()


def test_parquet_is_read_in_blocks_of_the_schema_columns(tmp_path: Path) -> None:
    recs = records(1000, seed=5)
    path = write_parquet(tmp_path / "r.parquet", recs, row_group=128)
    blocks = list(FileReader(SCHEMA).blocks(path, 300))
    assert [b.first for b in blocks] == [1, 301, 601, 901]
    assert "unused" not in blocks[0].data.schema.names
    dead = DeadLetters()
    parts = list(FileDataset([path], SCHEMA, batch_size=300, dead_letters=dead))
    assert [len(p) for p in parts] == [300, 300, 300, 100] and not dead.counts
    assert parts[1].user_id[0] == recs[300]["user"]


def test_format_comes_from_the_extension_else_the_schema(tmp_path: Path) -> None:
    assert [format_of(p) for p in ("a.jsonl", "a.csv.gz", "b.parquet", "c.tsv", "d.NDJSON")] == [
        "json", "csv", "parquet", None, "json"]
    assert schema_for_file(SCHEMA, "x.csv").format == "csv"
    assert schema_for_file(SCHEMA, "x.tsv") is SCHEMA
    assert schema_for_file(SCHEMA.model_copy(update={"format": "csv"}), "x.txt").format == "csv"
    with pytest.raises(ConfigError, match="parquet is for files"):
        make_parser(SCHEMA.model_copy(update={"format": "parquet"}))


@pytest.mark.slow
def test_csv_kernel_matches_the_reference_on_random_lines() -> None:
    """Every line, alone: the kernel (with its fallback) and the csv-module reference agree on ids and reasons."""
    rng = random.Random(7)
    pieces = ["", "0", "1", "-3", "2.50", "1e2", "007", "abc", '"q"', '"a,b"', '"x""y"', '"open', "a|b", "|", "x y",
              "-", "1.", "12345678901234567", "0.1234567890123456789012345"]
    parser = CsvLinesParser(SCHEMA.model_copy(update={"format": "csv"}), header=COLUMNS)
    for _ in range(1500):
        fields = [rng.choice(pieces) for _ in range(rng.choice([8, 9, 9, 9, 10]))]
        fields[0] = rng.choice(["0", "1", "0.5", fields[0]])
        line = ",".join(fields).encode()
        fast, rej_fast = parser.parse([line])
        slow, rej_slow = parser.parse_reference([line])
        assert [(r.reason, r.detail) for r in rej_fast] == [(r.reason, r.detail) for r in rej_slow], line
        assert canon(fast) == canon(slow), line


def test_json_keys_in_any_order_parse_alike() -> None:
    """The JSON kernel looks keys up from the field after the last one found: order must not matter."""
    recs = records(300, seed=11)
    rng = random.Random(1)
    in_order = [json.dumps(r).encode() for r in recs]
    shuffled = [json.dumps(dict(rng.sample(list(r.items()), len(r)))).encode() for r in recs]
    parser = make_parser(SCHEMA)
    (a, ra), (b, rb) = parser.parse(in_order), parser.parse(shuffled)
    assert not ra and not rb and canon(a) == canon(b)
    same_name = SchemaConfig.model_validate(SCHEMA.model_dump() | {"label": "age"})  # label is also a dense field
    a, ra = make_parser(same_name).parse(in_order)
    b, rb = make_parser(same_name).parse(shuffled)
    assert canon(a) == canon(b) and [(r.index, r.reason) for r in ra] == [(r.index, r.reason) for r in rb]
    assert len(ra) == 300  # ages are not labels in [0, 1]: the first field of the name decides, as before
