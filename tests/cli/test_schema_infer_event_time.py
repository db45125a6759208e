"""`streamrec schema infer` finds the event time of a ratings log from any plausible epoch: MovieLens-100k's
Unix seconds of 1997-1998 (JSON lines, CSV, Parquet integers, Parquet timestamps), proposed as the event time
and never as a dense input; milliseconds, microseconds, nanoseconds and ISO-8601 text proposed with their
``event_time_unit`` and read by every parser into the same seconds; ``--event-time`` names it."""

from __future__ import annotations

import random
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cli.main import main
from launcher.system_config import load_config
from logrecords.file_formats import FileReader
from logrecords.schema_inference import infer_schema
from tests.cli.test_schema_infer import write as write_records

ML_FIRST, ML_LAST = 874_724_710, 893_286_638  # MovieLens-100k's first and last rating, Unix seconds
ARGS = ["--label", "liked", "--user", "user_id", "--item", "item_id"]


def movielens(n: int = 3000, seed: int = 0, scale: int = 1) -> list[dict[str, Any]]:
    """u.data's shape: user_id, item_id, rating 1-5, timestamp (in the file's own order, not sorted by time),
    with the README's derived label."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        rating = rng.choice([1, 2, 3, 3, 4, 4, 4, 5, 5])
        out.append({"user_id": rng.randint(1, 943), "item_id": rng.randint(1, 1682), "rating": rating,
                    "timestamp": rng.randint(ML_FIRST, ML_LAST) * scale, "liked": int(rating >= 4)})
    out[n // 3]["timestamp"], out[n // 2]["timestamp"] = ML_FIRST * scale, ML_LAST * scale
    return out


def write(path: Path, recs: list[dict[str, Any]], types: dict[str, Any] | None = None) -> Path:
    if path.suffix != ".parquet" or not types:
        return write_records(path, recs)
    pq.write_table(pa.table({k: pa.array([r[k] for r in recs], types.get(k)) for k in recs[0]}), path)
    return path


def infer(capsys: pytest.CaptureFixture[str], path: Path, *args: str) -> tuple[str, Any]:
    assert main(["schema", "infer", str(path), *ARGS, *args]) == 0
    text = capsys.readouterr().out
    out = path.with_suffix(".yaml")
    out.write_text(text)
    return text, load_config(out)


@pytest.mark.parametrize("suffix", [".jsonl", ".csv", ".parquet"])
def test_movielens_seconds_are_the_event_time_not_a_dense_input(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                 suffix: str) -> None:
    recs = movielens()
    data = write(tmp_path / f"u{suffix}", recs)
    text, config = infer(capsys, data)
    schema = config.schema_
    assert schema.event_time == "timestamp" and schema.dense_names == []
    assert config.train.model.n_dense == 0
    assert '  event_time: "timestamp"  # numbers in the Unix-seconds range (1997-09-20 .. 1998-04-22), named like ' \
           'a time -> the event time' in text
    # The parsers read the file with the proposal, the event time as the very seconds.
    times = [b.parse()[0].event_time for b in FileReader(schema).blocks(data, 1000)]
    np.testing.assert_array_equal(np.concatenate(times), [r["timestamp"] for r in recs])


def test_a_parquet_timestamp_column_is_the_event_time(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    recs = movielens(scale=1000)
    data = write(tmp_path / "u.parquet", recs, {"timestamp": pa.timestamp("ms")})
    text, config = infer(capsys, data)
    assert config.schema_.event_time == "timestamp"
    assert "a Parquet timestamp -> the event time" in text
    times = [b.parse()[0].event_time for b in FileReader(config.schema_).blocks(data, 1000)]
    np.testing.assert_array_equal(np.concatenate(times), [r["timestamp"] / 1000 for r in recs])


def parsed_times(schema: Any, data: Path) -> tuple[np.ndarray, list[Any]]:
    """The event times the file's parser reads under ``schema``, and its refusals."""
    times, rejected = [], []
    for block in FileReader(schema).blocks(data, 1000):
        batch, bad, _ = block.parse()
        times.append(batch.event_time)
        rejected += bad
    return np.concatenate(times), rejected


@pytest.mark.parametrize(("scale", "unit"), [(1000, "ms"), (10**6, "us"), (10**9, "ns")])
@pytest.mark.parametrize("suffix", [".jsonl", ".csv", ".parquet"])
def test_other_units_are_proposed_and_parsed_into_the_same_seconds(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str],
                                                                    suffix: str, scale: int, unit: str) -> None:
    recs = movielens(scale=scale)
    data = write(tmp_path / f"u{suffix}", recs)
    text, config = infer(capsys, data)
    schema = config.schema_
    assert (schema.event_time, schema.event_time_unit) == ("timestamp", unit) and schema.dense_names == []
    assert f"  event_time_unit: {unit}" in text
    times, rejected = parsed_times(schema, data)
    assert rejected == []
    np.testing.assert_allclose(times, [r["timestamp"] / scale for r in recs], rtol=0, atol=1e-6)


@pytest.mark.parametrize("suffix", [".jsonl", ".csv", ".parquet"])
def test_iso_dates_are_proposed_parsed_and_a_bad_one_refused_naming_the_field(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], suffix: str) -> None:
    recs = movielens(200)
    zones = ["Z", "", "+02:00", "-0530"]
    for k, r in enumerate(recs):
        r["timestamp"] = f"1997-{9 + k % 3:02d}-{1 + k % 28:02d}{'T' if k % 2 else ' '}12:{k % 60:02d}:0{k % 10}" \
                         f"{'.25' if k % 3 == 0 else ''}{zones[k % 4]}"
    data = write(tmp_path / f"u{suffix}", recs)
    _, config = infer(capsys, data)
    schema = config.schema_
    assert (schema.event_time, schema.event_time_unit) == ("timestamp", "iso8601")
    assert {s.name for s in schema.slots} == {"user_id", "item_id", "rating"}
    times, rejected = parsed_times(schema, data)
    want = [_utc_seconds(r["timestamp"]) for r in recs]
    assert rejected == [] and np.allclose(times, want, rtol=0, atol=1e-6)
    recs[7]["timestamp"] = "1997-02-30T10:00:00Z"
    data = write(tmp_path / f"bad{suffix}", recs)
    times, rejected = parsed_times(schema, data)
    assert len(times) == 199 and [r.index for r in rejected] == [7]
    assert rejected[0].detail.startswith("field 'timestamp': event time must be ISO-8601 date text")


def _utc_seconds(text: str) -> float:
    t = datetime.fromisoformat(text)
    return (t if t.tzinfo else t.replace(tzinfo=UTC)).timestamp()


def test_an_unnamed_time_is_found_when_it_rises(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A column named like nothing, in the epoch range: the event time when the log is in time order; when it
    is not, a dense input standardized by the sample's statistics."""
    recs = movielens()
    for r, t in zip(recs, sorted(r["timestamp"] for r in recs), strict=True):
        r["when"], r["amount"] = t, r.pop("timestamp")
    recs[10]["when"] -= 5000  # a few late arrivals: still non-decreasing in most of the sample
    data = write(tmp_path / "u.jsonl", recs)
    text, config = infer(capsys, data)
    assert config.schema_.event_time == "when" and config.schema_.dense_names == ["amount"]
    assert "the Unix-seconds range (1997-09-20 .. 1998-04-22), non-decreasing -> the event time" in text
    # a time out of order is no event time, but still no count: standardized, not flattened by log1p
    assert ('{name: "amount", kind: dense, transform: {kind: standardize, mean: 883877223.296, '
            "std: 5307982.412277834, prior_count: 3000}}  # integers with many distinct values (3000) "
            "-> dense (counts, amounts), 8.747e+08 .. 8.933e+08, skew 0.00 -> transform standardize") in text


def test_two_times_one_event_time_and_no_dense_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    recs = movielens()
    for r in recs:
        r["updated_at"] = r["timestamp"] + 3600
    data = write(tmp_path / "u.jsonl", recs)
    text, config = infer(capsys, data)
    assert config.schema_.event_time == "timestamp" and config.schema_.dense_names == []
    assert '# updated_at: ignored: Unix seconds (1997-09-20 .. 1998-04-23): another time; the event time is ' \
           '"timestamp" (a time is no dense input)' in text
    text, config = infer(capsys, data, "--event-time", "updated_at")
    assert config.schema_.event_time == "updated_at" and config.schema_.dense_names == []
    assert "--event-time -> the event time" in text and "another time; the event time is \"updated_at\"" in text
    assert text.startswith("# Proposed by `streamrec schema infer")
    assert "--event-time updated_at" in text.splitlines()[0]


def test_event_time_flag_errors_name_the_column(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    recs = movielens(300)
    for r in recs:
        r["genre"] = "drama"
    data = write(tmp_path / "u.jsonl", recs)
    for flag, message in [("nope", "--event-time 'nope' is not a column of u.jsonl"),
                          ("liked", "--event-time 'liked' is also the label, user or item column"),
                          ("genre", "--event-time 'genre' must hold epoch numbers or ISO-8601 date text; the "
                                    "sample has 'drama'")]:
        assert main(["schema", "infer", str(data), *ARGS, "--event-time", flag]) == 2
        assert message in capsys.readouterr().err
    text, config = infer(capsys, data, "--event-time", "rating")  # the user's word, with a warning
    assert config.schema_.event_time == "rating"
    assert "WARNING: values 1 .. 5 are not Unix seconds from 1973 to 2100" in text


def test_small_numbers_and_yyyymmdd_dates_are_not_times(tmp_path: Path) -> None:
    """Numbers below 1973 in seconds are rather counts or yyyymmdd dates, even in a column named date; numbers
    in the epoch range in no time order, in a column whose name only ends like "at", are no time either."""
    rng = random.Random(1)
    recs = [{"label": k % 2, "item": f"i{k % 9}", "date": 19970920 + k, "ts": 1000 + k,
             "format": rng.randint(10**11, 4 * 10**12)} for k in range(200)]
    data = write(tmp_path / "f.jsonl", recs)
    inf = infer_schema(data)
    assert inf.schema().event_time is None
    roles = {f.name: f.role for f in inf.fields}
    assert (roles["date"], roles["ts"], roles["format"]) == ("dense", "dense", "dense")
