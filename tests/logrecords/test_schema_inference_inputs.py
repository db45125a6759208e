"""``schema infer`` on hostile files: each bad record is left out and counted by reason with the line it was
first met on, each column no parser reads is ignored with why, and the other records and columns are kept;
the proposal still passes the config loader and the parsers read the file with it."""

from __future__ import annotations

import datetime
import decimal
import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cli.commands.schema import check_yaml, render_yaml
from cli.main import main
from core.errors import InvalidInput
from logrecords.file_formats import FileReader
from logrecords.schema_inference import Inference, infer_schema

GOOD = 40


def good(k: int) -> dict[str, Any]:
    return {"label": k % 2, "item": f"i{k % 7}", "n": k}


def jsonl(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(ln + "\n" for ln in lines))
    return path


def by_name(inf: Inference) -> dict[str, Any]:
    return {f.name: f for f in inf.fields}


def checked(inf: Inference) -> str:
    text = render_yaml(inf, command="streamrec schema infer test")
    check_yaml(text, source="test")
    return text


def parse_all(inf: Inference) -> tuple[int, list[Any], list[np.ndarray]]:
    """Records, rejects and event-time arrays of the whole file under the proposed schema."""
    n, rejected, times = 0, [], []
    for block in FileReader(inf.schema()).blocks(inf.path, 100):
        batch, rej, _ = block.parse()
        n += len(batch)
        rejected += rej
        if batch.event_time is not None:
            times.append(batch.event_time)
    return n, rejected, times


def test_json_nested_past_the_decoder_and_huge_integers_are_counted_by_line(tmp_path: Path) -> None:
    lines = [json.dumps(good(k)) for k in range(GOOD)]
    lines.insert(3, '{"label": 1, "item": "x", "deep": ' + "[" * 100_000 + "]" * 100_000 + "}")  # line 4
    lines.insert(10, '{"label": 0, "item": "y", "n": ' + "7" * 5000 + "}")  # line 11
    lines.insert(20, '{"label": 0, "item": "y", "n": ' + "8" * 5000 + "}")  # line 21
    lines.insert(30, "[1, 2]")  # line 31
    lines.append('{"label": 1, "item": "z", "n": 5, "nest": ' + "[" * 500 + "]" * 500 + "}")  # decodes: a field
    inf = infer_schema(jsonl(tmp_path / "f.jsonl", lines))
    assert inf.records == GOOD + 1
    assert inf.notes == [
        "1 record of the sample left out: JSON nested deeper than the decoder takes (first at line 4)",
        "2 records of the sample left out: not JSON (Exceeds the limit (4300 digits) for integer string "
        "conversion) (first at line 11)",
        "1 record of the sample left out: not a JSON object (first at line 31)",
    ]
    f = by_name(inf)
    assert f["nest"].role == "ignored" and f["nest"].why.startswith("lists of list")
    assert f["n"].role == "dense" and f["item"].role == "sparse"
    checked(inf)


def test_json_integers_past_64_bits_and_past_the_float_range(tmp_path: Path) -> None:
    lines = [json.dumps(good(k) | {"big": 10**400 + k, "mixed": k if k % 2 else 2**70}) for k in range(GOOD)]
    inf = infer_schema(jsonl(tmp_path / "f.jsonl", lines))
    f = by_name(inf)
    assert (f["big"].role, f["big"].hash.value) == ("sparse", "fnv1a") and "past 64 bits" in f["big"].why
    assert (f["mixed"].role, f["mixed"].hash.value) == ("sparse", "fnv1a")
    checked(inf)
    n, rejected, _ = parse_all(inf)
    assert (n, rejected) == (GOOD, [])
    bad_label = jsonl(tmp_path / "l.jsonl", [json.dumps({"label": 10**400, "item": "a"})])
    with pytest.raises(InvalidInput, match=r"must hold numbers in \[0, 1\] or a rating scale; the sample has 1000"):
        infer_schema(bad_label)


def test_csv_field_over_the_csv_limit_and_a_5000_digit_integer(tmp_path: Path) -> None:
    rows = ["label,item,n,code"] + [f"{k % 2},i{k % 7},{k},{k % 3}" for k in range(GOOD)]
    rows.insert(5, "1,i1,3," + "y" * 200_000)  # line 6: a field past the csv module's 128 KiB
    rows.insert(8, "0,i2,4," + "7" * 5000)  # line 9: reads as text, hashed
    rows.insert(12, "0,i2")  # line 13: too few fields
    path = tmp_path / "f.csv"
    path.write_text("\n".join(rows) + "\n")
    inf = infer_schema(path)
    assert inf.records == GOOD + 1
    assert inf.notes == [
        "1 record of the sample left out: a CSV field longer than the csv module's limit of 131072 bytes "
        "(first at line 6)",
        "1 record of the sample left out: a row whose number of fields is not the header's 4 (first at line 13)",
    ]
    code = by_name(inf)["code"]
    assert (code.role, code.hash.value) == ("sparse", "fnv1a") and "some past 64 bits" in code.why
    checked(inf)


def test_lines_over_the_line_limit_are_left_out_unread(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "f.jsonl"
    with open(path, "w") as f:
        f.write(json.dumps(good(0)) + "\n")
        f.write('{"label": 1, "item": "' + "q" * (3 << 20) + '"}\n')  # line 2: 3 MiB
        f.writelines(json.dumps(good(k)) + "\n" for k in range(1, GOOD))
    assert main(["schema", "infer", str(path), "--max-line-bytes", str(1 << 20)]) == 0
    out, err = capsys.readouterr()
    note = "1 record of the sample left out: a line longer than the line limit of 1048576 bytes (--max-line-bytes) " \
           "(first at line 2)"
    assert f"# note: {note}" in out and f"streamrec schema infer: note: {note}" in err
    assert f"from the first {GOOD} records" in out
    assert main(["schema", "infer", str(path)]) == 0  # the default limit (16 MiB) takes it
    assert "left out" not in capsys.readouterr().out
    assert main(["schema", "infer", str(path), "--max-line-bytes", "0"]) == 2
    header = tmp_path / "h.csv"
    header.write_text("label," + "c" * 5000 + "\n1,2\n")
    with pytest.raises(InvalidInput, match="line 1, the CSV header: a line longer than the line limit of 100 bytes"):
        infer_schema(header, max_line_bytes=100)


def test_every_record_bad_is_one_error_naming_the_reasons(tmp_path: Path) -> None:
    path = jsonl(tmp_path / "f.jsonl", ['{"label": ' + "[" * 100_000, "not json", '"a string"'])
    with pytest.raises(InvalidInput, match=r"no readable record in the first 10000: .*nested deeper than the "
                                           r"decoder takes \(first at line 1\).*not JSON \(Expecting value\) "
                                           r"\(first at line 2\).*not a JSON object \(first at line 3\)"):
        infer_schema(path)


def test_parquet_decimal_binary_date_duration_and_time_columns(tmp_path: Path) -> None:
    days = [datetime.date(1997, 9, 20) + datetime.timedelta(days=k) for k in range(GOOD)]
    table = pa.table({
        "label": [k % 2 for k in range(GOOD)],
        "item": [f"i{k % 7}" for k in range(GOOD)],
        "price": pa.array([decimal.Decimal(k) / 4 for k in range(GOOD)], pa.decimal128(12, 2)),
        "blob": pa.array([bytes([k, 255]) for k in range(GOOD)], pa.binary()),
        "blobs": pa.array([[bytes([k])] for k in range(GOOD)], pa.list_(pa.binary())),
        "day": pa.array(days, pa.date32()),
        "wait": pa.array([datetime.timedelta(seconds=k) for k in range(GOOD)], pa.duration("s")),
        "clock": pa.array([datetime.time(k % 24) for k in range(GOOD)], pa.time32("s")),
        "meta": pa.array([{"a": k} for k in range(GOOD)]),
    })
    path = tmp_path / "f.parquet"
    pq.write_table(table, path)
    inf = infer_schema(path)
    f = by_name(inf)
    assert f["price"].role == "dense" and "Parquet decimals" in f["price"].why
    assert f["day"].role == "event_time" and "1997-09-20 .. 1997-10-29" in f["day"].why
    assert f["day"].why.endswith("a Parquet date -> the event time")
    assert f["blob"].role == "ignored" and f["blob"].why.startswith("binary values (binary): the Parquet reader")
    assert f["blobs"].role == "ignored" and "binary values" in f["blobs"].why
    assert f["wait"].role == "ignored" and f["wait"].why.startswith("durations (duration[s])")
    assert f["clock"].role == "ignored" and f["clock"].why.startswith("times of day")
    assert f["meta"].role == "ignored" and "struct" in f["meta"].why
    text = checked(inf)
    assert '  event_time: "day"' in text and "# blob: ignored: binary values" in text
    n, rejected, times = parse_all(inf)  # the reader takes the date as the day's midnight, the decimal as a float
    assert (n, rejected) == (GOOD, [])
    want = [datetime.datetime(d.year, d.month, d.day, tzinfo=datetime.UTC).timestamp() for d in days]
    np.testing.assert_array_equal(np.concatenate(times), want)
    with pytest.raises(InvalidInput, match="--item 'blob': binary values"):
        infer_schema(path, user="item", item="blob")


@pytest.mark.parametrize("suffix", [".jsonl", ".csv", ".parquet"])
def test_an_empty_column_name_is_ignored_and_the_rest_kept(tmp_path: Path, suffix: str) -> None:
    recs = [good(k) | {"": k % 3} for k in range(GOOD)]
    path = tmp_path / f"f{suffix}"
    if suffix == ".jsonl":
        jsonl(path, [json.dumps(r) for r in recs])
    elif suffix == ".csv":
        path.write_text("label,item,n,\n" + "".join(f"{r['label']},{r['item']},{r['n']},{r['']}\n" for r in recs))
    else:
        pq.write_table(pa.table({k: [r[k] for r in recs] for k in recs[0]}), path)
    inf = infer_schema(path)
    f = by_name(inf)
    assert f[""].role == "ignored" and f[""].why.startswith("a column with no name")
    assert (f["label"].role, f["item"].role, f["n"].role) == ("label", "sparse", "dense")
    text = checked(inf)
    assert "# (no name): ignored: a column with no name" in text
    n, rejected, _ = parse_all(inf)
    assert (n, rejected) == (GOOD, [])
