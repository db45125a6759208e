"""Propose a record schema from a sample of a file (``streamrec schema infer``).

The first ``sample`` records (10,000 by default) of a JSON-lines, CSV or Parquet file are read
and every column is classified, each guess with the reason for it:

- the label: ``--label``, else a column named label/click/clicked/y/target, else one named
  rating/stars/score; numbers in [0, 1], or a rating-like scale (``RATING_MAX_DISTINCT`` or fewer
  distinct numbers from 0 to 10, as 1-5 stars or 0.5-5 in half stars), proposed as a derived label
  ``{field, at_least}`` whose positives are the top quarter of the scale (4 and 5 of 1-5);
- an event time (``--event-time``, else found): numbers that all fall in one epoch unit, Unix
  seconds, milliseconds, microseconds or nanoseconds from 1973 to 2100 (smaller numbers are
  rather counts or yyyymmdd dates), in a column named like a time (time/ts/timestamp/date...),
  typed as one (a Parquet timestamp or date), or unnamed but non-decreasing in most of the
  sample; never a column named like an id. Its unit (or ``iso8601`` for ISO-8601 date text) is
  proposed as ``event_time_unit``, which the parsers read it in; a named time wins over an
  unnamed one, seconds over other units; a found time is never proposed as a dense input;
- sparse, hash ``int``: non-negative integers below 2**56 named like an id (``id``, ``*_id``,
  ``*Id``, ``user``, ``item``, ...), the ``--user``/``--item`` columns, or integers with few distinct values
  (<= ``FEW_DISTINCT``): ids stay lossless;
- sparse, hash ``fnv1a``: strings (and mixes of strings and integers, hashed as their text);
- a list slot: lists of strings or integers (JSON, Parquet), or CSV text split on ``|`` or ``;``;
- dense: the other numbers (continuous values);
- ``optional``: a dense or sparse field some records of the sample lack (absent or null; never
  the user or the item), so that the parsers neither count nor refuse its absence;
- ignored, with the reason: booleans, nested objects, floats mixed with text, empty columns, a
  column with no name, Parquet types the Parquet reader does not read (binary, durations, ...).

A record the sample cannot use (not JSON, nested past the decoder's depth, a CSV field past the
csv module's limit, a line past ``max_line_bytes``) is left out and counted, by reason, in the
inference's notes; the lines are read cut at ``max_line_bytes``, so one huge line is never held.

With a user and an item column, :func:`propose_towers` puts a sparse field in the item tower
when it is constant for each item id of the sample (the item's own attributes), else in the
user tower; dense fields feed the user tower (the item tower reads none). The sample is held
in Python values: this is a one-off, bounded read, not a hot path.
"""

from __future__ import annotations

import csv
import dataclasses
import itertools
import json
import math
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, cast

import numpy as np

from core.errors import InvalidInput
from logrecords.dense_transform import (
    DenseTransform,
    IdentityTransform,
    Log1pTransform,
    StandardizeTransform,
)
from logrecords.file_formats import format_of, line_blocks
from logrecords.hashing import SLOT_SHIFT
from logrecords.schema_config import HashKind, LabelRule, SchemaConfig, SlotConfig, SlotKind

DEFAULT_SAMPLE = 10_000
DEFAULT_MAX_LINE_BYTES = 16 << 20
FEW_DISTINCT = 32
LABEL_NAMES = ("label", "click", "clicked", "is_click", "clk", "y", "target")
RATING_NAMES = ("rating", "ratings", "stars", "score")  # a label when no column has a name of LABEL_NAMES
RATING_MAX_DISTINCT = 21  # 0..10 in half steps
UNIX_LO, UNIX_HI = 100_000_000, 4_102_444_800  # 1973-03-03 .. 2100-01-01 in seconds
EPOCH_UNITS = (("seconds", 1), ("milliseconds", 10**3), ("microseconds", 10**6), ("nanoseconds", 10**9))
MONOTONE_SHARE = 0.9  # an unnamed time column: this share of successive sample values is non-decreasing
LOG1P = Log1pTransform()
LONG_TAIL_SKEW = 1.0  # a non-negative field skewed past this is standardized as logs when that evens it out
BIG_DENSE = 1e6  # a dense field beyond this magnitude is flattened by the models' log1p(max(x, 0))
_INT64 = 1 << 63
_ISO_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}([T ][0-9]{2}:[0-9]{2}(:[0-9]{2}([.,][0-9]+)?)?"
                       r"(Z|[+-][0-9]{2}(:?[0-9]{2})?)?)?")
LIST_SEPARATORS = ("|", ";")
_INT = re.compile(r"-?[0-9]+")
_NUMBER = re.compile(r"-?[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?")
_TIME_NAME = re.compile(r"(^|_)(ts|time|timestamp|date|datetime|event_time|at)$|time$|(?-i:[a-z]At)$", re.IGNORECASE)
_ID_NAME = re.compile(r"(^id$|_id$|(?-i:[a-z]Id)$|(^|_)(user|item|uid|iid|product|movie|ad|campaign|query)$)",
                      re.IGNORECASE)


@dataclass(frozen=True)
class FieldGuess:
    """What one column was taken for, and why (the YAML comment)."""

    name: str
    role: str  # label | event_time | dense | sparse | ignored
    why: str
    at_least: float | None = None  # a label derived from a rating: 1 where at least this
    optional: bool = False  # absent from some records of the sample: neither counted nor refused
    hash: HashKind | None = None
    separator: str | None = None
    tower: str | None = None  # two_tower: user | item
    many: bool = False  # a list slot: several ids per record
    unit: str = "s"  # the event time: schema.event_time_unit
    transform: DenseTransform = LOG1P  # a dense field: how its value becomes a model input


InferredFormat = Literal["json", "csv", "parquet"]  # the formats a schema is inferred from


@dataclass
class Inference:
    """The proposed schema, with one guess per column of the sample."""

    path: Path
    format: InferredFormat
    records: int
    fields: list[FieldGuess]
    delimiter: str = ","
    columns: tuple[str, ...] = ()
    user: str | None = None
    item: str | None = None
    notes: list[str] = field(default_factory=list)

    def schema(self) -> SchemaConfig:
        guess = next(f for f in self.fields if f.role == "label")
        label: str | LabelRule = guess.name if guess.at_least is None else LabelRule(field=guess.name,
                                                                                    at_least=guess.at_least)
        etime_field = next((f for f in self.fields if f.role == "event_time"), None)
        etime = None if etime_field is None else etime_field.name
        slots = [SlotConfig(name=f.name, kind=SlotKind.DENSE, optional=f.optional, transform=f.transform)
                 for f in self.fields if f.role == "dense"]
        slots += [SlotConfig(name=f.name, kind=SlotKind.SPARSE, hash=f.hash or HashKind.FNV1A, separator=f.separator,
                             optional=f.optional) for f in self.fields if f.role == "sparse"]
        return SchemaConfig(format=self.format, label=label, slots=tuple(slots), event_time=etime,
                            event_time_unit="s" if etime_field is None else etime_field.unit,
                            user_id=self.user, item_id=self.item, delimiter=self.delimiter, columns=self.columns)


@dataclass
class Sample:
    """Columns (name -> values, None where absent) of the sample's records, and what was left out."""

    cols: dict[str, list[Any]]
    records: int
    skipped: Counter[str] = field(default_factory=Counter)  # reason -> records left out
    first_at: dict[str, str] = field(default_factory=dict)  # reason -> where it was first met ("line 7")
    types: dict[str, str] = field(default_factory=dict)  # Parquet column -> date | timestamp | decimal
    unreadable: dict[str, str] = field(default_factory=dict)  # Parquet column -> why no parser reads it
    delimiter: str = ","
    columns: tuple[str, ...] = ()

    def skip(self, where: str, reason: str) -> None:
        self.skipped[reason] += 1
        self.first_at.setdefault(reason, where)

    def notes(self) -> list[str]:
        return [f"{k} record{'s' if k > 1 else ''} of the sample left out: {reason} (first at {self.first_at[reason]})"
                for reason, k in self.skipped.items()]


def read_sample(path: Path, fmt: str, n: int, *, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> Sample:
    """The first ``n`` records of the file, lines read cut at ``max_line_bytes``."""
    if fmt == "parquet":
        return _parquet_sample(path, n)
    if fmt not in ("csv", "json"):
        raise InvalidInput(f"schema infer reads json, csv or parquet files, not {fmt}")
    lines: list[tuple[int, bytes]] = []
    for first, block in line_blocks(path, min(n + 1, 8192), max_line_bytes=max_line_bytes):
        lines += enumerate(block, first)
        if len(lines) > n:
            break
    too_long = f"a line longer than the line limit of {max_line_bytes} bytes (--max-line-bytes)"
    if fmt == "csv":
        return _csv_sample(lines, n, max_line_bytes, too_long)
    sample = Sample({}, 0)
    docs = []
    for line_no, raw in lines[:n]:
        where = f"line {line_no}"
        if len(raw) > max_line_bytes:
            sample.skip(where, too_long)
            continue
        try:
            d = json.loads(raw)
        except RecursionError:
            sample.skip(where, "JSON nested deeper than the decoder takes")
            continue
        except ValueError as exc:
            sample.skip(where, f"not JSON ({_short(str(exc).split(':', 1)[0], 80)})")
            continue
        if isinstance(d, dict):
            docs.append(d)
        else:
            sample.skip(where, "not a JSON object")
    names: dict[str, None] = {}
    for d in docs:
        names.update(dict.fromkeys(d))
    sample.cols, sample.records = {k: [d.get(k) for d in docs] for k in names}, len(docs)
    return sample


def _short(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def _sniff_delimiter(header: str) -> str:
    counts = {d: header.count(d) for d in (",", "\t", ";", "|")}
    best = max(counts, key=lambda d: counts[d])
    return best if counts[best] else ","


def _csv_sample(lines: list[tuple[int, bytes]], n: int, max_line_bytes: int, too_long: str) -> Sample:
    """Each line is one record (as the CSV parser reads them), split alone so an error names its line."""
    if not lines:
        raise InvalidInput("the file is empty: a CSV file needs a header row")
    line_no, head = lines[0]
    if len(head) > max_line_bytes:
        raise InvalidInput(f"line {line_no}, the CSV header: {too_long}")
    header_text = head.rstrip(b"\r\n").decode("utf-8-sig", "replace")
    delim = _sniff_delimiter(header_text)
    try:
        header = [h.strip() for h in next(csv.reader([header_text], delimiter=delim))]
    except csv.Error as exc:
        raise InvalidInput(f"line {line_no}, the CSV header: {_csv_error(exc)}") from None
    sample = Sample({}, 0, delimiter=delim, columns=tuple(header))
    rows = []
    for line_no, raw in lines[1 : n + 1]:
        where = f"line {line_no}"
        if len(raw) > max_line_bytes:
            sample.skip(where, too_long)
            continue
        try:
            row = next(csv.reader([raw.rstrip(b"\r\n").decode("utf-8", "replace")], delimiter=delim), [])
        except csv.Error as exc:
            sample.skip(where, _csv_error(exc))
            continue
        if len(row) == len(header):
            rows.append(row)
        else:
            sample.skip(where, f"a row whose number of fields is not the header's {len(header)}")
    sample.cols = {h: [(r[c] if r[c] != "" else None) for r in rows] for c, h in enumerate(header)}
    sample.records = len(rows)
    return sample


def _csv_error(exc: csv.Error) -> str:
    if "field larger than field limit" in str(exc):
        return f"a CSV field longer than the csv module's limit of {csv.field_size_limit()} bytes"
    return f"not a CSV row ({exc})"


def _parquet_sample(path: Path, n: int) -> Sample:
    from logrecords.parquet_reader import require_pyarrow

    pa = require_pyarrow()
    try:
        f = pa.parquet.ParquetFile(path)
        rb = next(f.iter_batches(batch_size=n), None)
    except (pa.ArrowException, OSError) as exc:
        raise InvalidInput(f"{path}: not a readable Parquet file: {exc}") from None
    if rb is None:
        return Sample({name: [] for name in f.schema_arrow.names}, 0)
    sample = Sample({}, rb.num_rows)
    for name in rb.schema.names:
        arr = rb.column(name)
        if pa.types.is_dictionary(arr.type):
            arr = arr.dictionary_decode()
        t = arr.type
        if pa.types.is_date(t):  # the Parquet reader reads a date as its midnight's timestamp
            arr, t, sample.types[name] = arr.cast(pa.timestamp("s")), pa.timestamp("s"), "date"
        if pa.types.is_timestamp(t):  # as the reader sees it: float seconds
            unit = {"s": 1, "ms": 1e3, "us": 1e6, "ns": 1e9}[t.unit]
            sample.types.setdefault(name, "timestamp")
            sample.cols[name] = [None if v is None else v / unit for v in arr.cast(pa.int64()).to_pylist()]
        elif pa.types.is_decimal(t):  # the reader reads decimals as float64
            sample.types[name] = "decimal"
            sample.cols[name] = arr.cast(pa.float64()).to_pylist()
        elif why := _unread_parquet(pa, t):
            sample.unreadable[name] = why
            sample.cols[name] = [None] * len(arr)
        else:
            sample.cols[name] = arr.to_pylist()
    return sample


def _unread_parquet(pa: Any, t: Any) -> str | None:
    """Why the Parquet reader takes no value of type ``t`` as a label, dense value or id (None: it may)."""
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return _unread_parquet(pa, t.value_type)
    if (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_string(t) or pa.types.is_large_string(t)
            or pa.types.is_boolean(t) or pa.types.is_null(t) or pa.types.is_dictionary(t)):
        return None
    if hasattr(pa.types, "is_string_view") and pa.types.is_string_view(t):
        return None
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return (f"binary values ({t}): the Parquet reader hashes strings and integers, not bytes "
                "(cast the column to string to use it as a sparse field)")
    if pa.types.is_duration(t) or pa.types.is_time(t):
        return (f"{'durations' if pa.types.is_duration(t) else 'times of day'} ({t}): the Parquet reader reads no "
                "such type (cast it to a number of seconds to use it as a dense field)")
    return f"Parquet type {t}: not a flat field the Parquet reader reads"


def _kind(v: Any, csv_text: bool) -> str:
    """int | bigint | float | str | bool | list | other, for one non-null value (CSV text read as numbers);
    a bigint is past 64 bits: neither an int id nor a float the dense input keeps."""
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int):
        return "int" if -_INT64 <= v < 2 * _INT64 else "bigint"
    if isinstance(v, float):
        return "float" if math.isfinite(v) else "other"
    if isinstance(v, str):
        if csv_text and _INT.fullmatch(v):
            return "int" if len(v) <= 20 and -_INT64 <= int(v) < 2 * _INT64 else "bigint"
        if csv_text and _NUMBER.fullmatch(v):
            return "float" if math.isfinite(_num(v)) else "other"
        return "str"
    if isinstance(v, list):
        return "list"
    return "other"


def _num(v: Any) -> float:
    try:
        return float(v)
    except OverflowError:  # an integer past the float range
        return math.inf if int(v) > 0 else -math.inf


def _is_id_int(values: list[Any]) -> bool:
    return all(0 <= int(v) < (1 << SLOT_SHIFT) for v in values)


def _guess(name: str, values: list[Any], *, csv_text: bool, forced_sparse: bool) -> FieldGuess:
    present = [v for v in values if v is not None]
    if not present:
        return FieldGuess(name, "ignored", "no value in the sample")
    kinds = Counter(_kind(v, csv_text) for v in present)
    if kinds.keys() == {"list"}:
        elems = [e for v in present for e in v]
        ek = Counter(_kind(e, False) for e in elems if e is not None)
        if not ek or ek.keys() <= {"str", "int"}:
            ints = ek.keys() == {"int"} and _is_id_int(elems)
            return FieldGuess(name, "sparse", f"lists of {'integer ids' if ints else 'strings'} -> a list slot "
                              f"({len(elems)} ids in {len(present)} records)",
                              hash=HashKind.INT if ints else HashKind.FNV1A, many=True)
        return FieldGuess(name, "ignored", f"lists of {', '.join(sorted(ek))}: only strings or integers are ids")
    if "other" in kinds or "list" in kinds:
        return FieldGuess(name, "ignored", "nested or mixed values: not a flat field")
    if "bool" in kinds:
        return FieldGuess(name, "ignored", "booleans are neither numbers nor ids to the parsers (write 0/1 to use it)")
    distinct = len(set(present))  # flat values: str, int or float
    if "str" in kinds or "bigint" in kinds:
        if "float" in kinds:
            return FieldGuess(name, "ignored", f"floats mixed with {'text' if 'str' in kinds else 'huge integers'}")
        if csv_text and "str" in kinds:
            for sep in LIST_SEPARATORS:
                if sum(sep in v for v in present) >= max(1, len(present) // 5):
                    return FieldGuess(name, "sparse", f"text holding {sep!r}-separated values in "
                                      f"{sum(sep in v for v in present)} of {len(present)} records -> a list slot",
                                      hash=HashKind.FNV1A, separator=sep, many=True)
        what = "strings" if kinds.keys() == {"str"} else "integers" if "str" not in kinds else "strings and integers"
        what += ", some past 64 bits" if "bigint" in kinds else ""
        return FieldGuess(name, "sparse", f"{what}, {distinct} distinct in the sample -> sparse, fnv1a hash",
                          hash=HashKind.FNV1A)
    if "float" in kinds:
        return _dense_guess(name, f"numbers with fractions, {distinct} distinct -> dense", present)
    ints = [int(v) for v in present]
    id_like = bool(_ID_NAME.search(name)) or forced_sparse
    if id_like or distinct <= FEW_DISTINCT:
        why = ("integer ids" if id_like else f"integers with few distinct values ({distinct} <= {FEW_DISTINCT})")
        if _is_id_int(ints):
            return FieldGuess(name, "sparse", f"{why} -> sparse, int hash (lossless)", hash=HashKind.INT)
        return FieldGuess(name, "sparse", f"{why}, some negative or >= 2**56 -> sparse, fnv1a hash of the text",
                          hash=HashKind.FNV1A)
    return _dense_guess(name, f"integers with many distinct values ({distinct}) -> dense (counts, amounts)", ints)


def _dense_guess(name: str, why: str, values: list[Any]) -> FieldGuess:
    transform, how = propose_transform(np.array([_num(v) for v in values], np.float64))
    warning = _magnitude(values) if isinstance(transform, Log1pTransform) else ""
    return FieldGuess(name, "dense", f"{why}, {how}{warning}", transform=transform)


def propose_transform(values: np.ndarray) -> tuple[DenseTransform, str]:
    """The transform that fits a dense field's sample values (finite float64), and why in words: a rate
    in [0, 1] as it is; a constant through the default log1p; every other field standardized by the
    sample's mean and std (the prior of training's running statistics), of its logs when it is
    non-negative with a long right tail that log1p makes more symmetric. Standardizing beat log1p on
    most real tabular logs measured (bench/dense_transforms.py)."""
    lo, hi = float(values.min()), float(values.max())
    std = float(values.std())
    if lo >= 0.0 and hi <= 1.0:
        return IdentityTransform(), "within [0, 1] -> transform none"
    if std == 0.0:
        return Log1pTransform(), "one value in the sample -> transform log1p"
    skew = _skew(values)
    if lo >= 0.0 and skew > LONG_TAIL_SKEW:
        logs = np.log1p(values)
        log_skew = _skew(logs)
        if abs(log_skew) < skew and float(logs.std()) > 0.0:
            return (StandardizeTransform(log=True, mean=float(logs.mean()), std=float(logs.std()),
                                         prior_count=int(values.size)),
                    f"non-negative, skew {skew:.2f} ({log_skew:.2f} under log1p) -> transform standardize of "
                    "log1p by the sample's mean and std")
    where = "signed" if lo < 0.0 else f"{lo:.4g} .. {hi:.4g}"
    return (StandardizeTransform(mean=float(values.mean()), std=std, prior_count=int(values.size)),
            f"{where}, skew {skew:.2f} -> transform standardize by the sample's mean and std")


def _skew(values: np.ndarray) -> float:
    """The sample skewness (third standardized moment) of float64 ``values`` with a non-zero std."""
    centred = values - values.mean()
    return float(np.mean(centred**3) / np.std(values) ** 3)


def _magnitude(values: list[Any]) -> str:
    """A warning for the YAML comment when the models' log1p(max(x, 0)) flattens the field's values."""
    nums = [_num(v) for v in values]
    lo, hi = min(nums), max(nums)
    if hi > BIG_DENSE:
        return (f"; WARNING: values up to {hi:.3g}, which log1p squashes to about {math.log1p(hi):.1f}: check it is "
                "not a time or an id")
    if lo < 0:
        return f"; WARNING: values down to {lo:.3g}, which the models' log1p(max(x, 0)) reads as 0"
    return ""


@dataclass(frozen=True)
class TimeGuess:
    """A column whose values read as times: the unit (seconds, milliseconds, ...; "iso" for date text)."""

    unit: str
    span: str  # "1997-09-20 .. 1998-04-23"
    named: bool  # named like a time, or typed as one


def _time_guess(name: str, values: list[Any], csv_text: bool, typed: bool) -> TimeGuess | None:
    """How the column's values read as times from 1973 to 2100, or None (see the module doc)."""
    present = [v for v in values if v is not None]
    if not present:
        return None
    named = typed or bool(_TIME_NAME.search(name))
    kinds = {_kind(v, csv_text) for v in present}
    if kinds == {"str"} and all(_ISO_DATE.fullmatch(v) for v in present):
        try:
            years = {datetime.fromisoformat(v.replace(",", ".")).year for v in present}
        except ValueError:
            return None
        if min(years) < 1970 or max(years) >= 2100:
            return None
        return TimeGuess("iso", f"{min(present)} .. {max(present)}", named)
    if not kinds <= {"int", "float"}:
        return None
    nums = [_num(v) for v in present]
    lo, hi = min(nums), max(nums)
    unit = next(((u, scale) for u, scale in EPOCH_UNITS if UNIX_LO * scale <= lo and hi < UNIX_HI * scale), None)
    if unit is None:
        return None
    if not named:
        rising = sum(b >= a for a, b in itertools.pairwise(nums))
        if len(nums) < 2 or lo == hi or rising < MONOTONE_SHARE * (len(nums) - 1):
            return None
    day = [datetime.fromtimestamp(x / unit[1], UTC).strftime("%Y-%m-%d") for x in (lo, hi)]
    return TimeGuess(unit[0], f"{day[0]} .. {day[1]}", named)


SCHEMA_UNIT = {"seconds": "s", "milliseconds": "ms", "microseconds": "us", "nanoseconds": "ns", "iso": "iso8601"}


def _unit_words(t: TimeGuess) -> str:
    return "ISO-8601 date text" if t.unit == "iso" else f"Unix {t.unit}"


def infer_schema(path: str | Path, *, fmt: str | None = None, label: str | None = None, user: str | None = None,
                 item: str | None = None, event_time: str | None = None, sample: int = DEFAULT_SAMPLE,
                 max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> Inference:
    """Read the first ``sample`` records of ``path`` and propose a schema (see the module doc)."""
    path = Path(path)
    if not path.is_file():
        raise InvalidInput(f"no such file: {path}")
    fmt = fmt or format_of(path)
    if fmt not in ("json", "csv", "parquet"):
        raise InvalidInput(f"{path}: cannot tell the format from the extension: pass --format json|csv|parquet")
    if max_line_bytes < 1:
        raise InvalidInput(f"the line limit must be >= 1 byte, not {max_line_bytes}")
    s = read_sample(path, fmt, sample, max_line_bytes=max_line_bytes)
    cols = s.cols
    if not s.records:
        left = "; ".join(s.notes()) or "the file has no record"
        raise InvalidInput(f"{path}: no readable record in the first {sample}: {left}")
    for role, name in (("--label", label), ("--user", user), ("--item", item), ("--event-time", event_time)):
        if name is not None and name not in cols:
            raise InvalidInput(f"{role} {name!r} is not a column of {path.name}; columns: {sorted(cols)}")
        if name is not None and name in s.unreadable:
            raise InvalidInput(f"{role} {name!r}: {s.unreadable[name]}")
    if event_time is not None and event_time in (label, user, item):
        raise InvalidInput(f"--event-time {event_time!r} is also the label, user or item column")
    if label is None:
        label = next((c for c in cols if c.lower() in LABEL_NAMES), None) or next(
            (c for c in cols if c.lower() in RATING_NAMES), None)
        if label is None:
            raise InvalidInput(f"no label column among {sorted(cols)}: pass --label COL")
        label_why = f"named '{label}'"
    else:
        label_why = "--label"
    csv_text = fmt == "csv"
    fields = [_label_guess(label, cols[label], csv_text, label_why)]
    names = [c for c in cols if c != label]
    times = {c: t for c in names
             if c not in (user, item) and not _ID_NAME.search(c)
             and (t := _time_guess(c, cols[c], csv_text, s.types.get(c) in ("date", "timestamp"))) is not None}
    etime = event_time
    if etime is None:
        found = sorted(times, key=lambda c: (not times[c].named, times[c].unit != "seconds"))
        etime = found[0] if found else None
    for c in names:
        if c == etime:
            fields.append(_event_time_guess(c, cols[c], times.get(c), csv_text, forced=event_time is not None,
                                            typed=s.types.get(c)))
        elif c == "":
            fields.append(FieldGuess(c, "ignored", "a column with no name: a slot needs one (name it to use it)"))
        elif c in s.unreadable:
            fields.append(FieldGuess(c, "ignored", s.unreadable[c]))
        elif c in times:
            t = times[c]
            why = f"{_unit_words(t)} ({t.span}): another time; the event time is {json.dumps(etime)}"
            fields.append(FieldGuess(c, "ignored", f"{why} (a time is no dense input)"))
        else:
            g = _guess(c, cols[c], csv_text=csv_text, forced_sparse=c in (user, item))
            if c in (user, item) and g.role != "sparse":
                raise InvalidInput(f"the {'user' if c == user else 'item'} column '{c}' is not an id field: {g.why}")
            if s.types.get(c) == "decimal" and g.role == "dense":
                g = FieldGuess(c, "dense", f"Parquet decimals, read as float64: {g.why}")
            fields.append(_optional_if_absent(g, cols[c], s.records, keyed=c in (user, item)))
    inf = Inference(path=path, format=cast(InferredFormat, fmt), records=s.records, fields=fields,
                    delimiter=s.delimiter, columns=s.columns, user=user, item=item)
    inf.notes += s.notes()
    if not any(f.role == "sparse" for f in fields):
        raise InvalidInput(f"{path}: no sparse field found (ids, strings, few-valued integers): a model needs one")
    if user is not None and item is not None:
        inf.fields = propose_towers(inf.fields, cols, user=user, item=item)
    return inf


def _label_guess(name: str, values: list[Any], csv_text: bool, why: str) -> FieldGuess:
    """Numbers in [0, 1] are the label; a rating-like scale becomes a derived label (module doc)."""
    present = [v for v in values if v is not None]
    bad = next((v for v in present if _kind(v, csv_text) not in ("int", "float")), None)
    if not present or bad is not None:
        raise InvalidInput(f"label column '{name}' must hold numbers in [0, 1] or a rating scale; the sample has "
                           f"{_short(repr(bad)) if present else 'no value'}")
    nums = [_num(v) for v in present]
    if all(0 <= x <= 1 for x in nums):
        positive = sum(x > 0.5 for x in nums) / len(nums)
        return FieldGuess(name, "label", f"the label ({why}): {positive:.1%} positive in the sample")
    scale = sorted(set(nums))
    if len(scale) > RATING_MAX_DISTINCT or scale[0] < 0 or scale[-1] > 10:
        raise InvalidInput(f"label column '{name}' must hold numbers in [0, 1] or a rating scale (at most "
                           f"{RATING_MAX_DISTINCT} values from 0 to 10); the sample has {len(scale)} values from "
                           f"{scale[0]:g} to {scale[-1]:g}")
    at_least = next(x for x in scale if x >= scale[-1] - (scale[-1] - scale[0]) / 4)
    positive = sum(x >= at_least for x in nums) / len(nums)
    return FieldGuess(name, "label", f"ratings {scale[0]:g} .. {scale[-1]:g} ({why}): the label is 1 where at least "
                      f"{at_least:g}, {positive:.1%} of the sample; move `at_least` to change it", at_least=at_least)


def _event_time_guess(name: str, values: list[Any], t: TimeGuess | None, csv_text: bool, *, forced: bool,
                      typed: str | None) -> FieldGuess:
    """The event-time field, found or named by ``--event-time``, with the unit the parsers are to read it in."""
    how = "--event-time" if forced else (f"a Parquet {typed}" if typed else
                                         "named like a time" if t is not None and t.named else "non-decreasing")
    if t is not None:
        what = "date text" if t.unit == "iso" else f"numbers in the Unix-{t.unit} range"
        return FieldGuess(name, "event_time", f"{what} ({t.span}), {how} -> the event time",
                          unit="s" if typed in ("date", "timestamp") else SCHEMA_UNIT[t.unit])
    present = [v for v in values if v is not None]
    if not present or any(_kind(v, csv_text) not in ("int", "float") for v in present):
        bad = next((v for v in present if _kind(v, csv_text) not in ("int", "float")), None)
        raise InvalidInput(f"--event-time {name!r} must hold epoch numbers or ISO-8601 date text; the sample has "
                           f"{_short(repr(bad)) if present else 'no value'}")
    lo, hi = min(map(_num, present)), max(map(_num, present))
    return FieldGuess(name, "event_time", f"--event-time; WARNING: values {lo:.4g} .. {hi:.4g} are not Unix "
                      "seconds from 1973 to 2100, which is what the parsers take them for")


def propose_towers(fields: list[FieldGuess], cols: dict[str, list[Any]], *, user: str, item: str) -> list[FieldGuess]:
    """Item tower: the item slot and every sparse field constant for each item id; user tower: the rest."""
    by_item: dict[str, list[int]] = defaultdict(list)
    for i, v in enumerate(cols[item]):
        if v is not None:
            by_item[json.dumps(v)].append(i)
    repeated = [rows for rows in by_item.values() if len(rows) > 1]
    out = []
    for f in fields:
        if f.role != "sparse":
            out.append(f)
            continue
        if f.name == item:
            out.append(_with(f, "item", "the item id"))
        elif f.name == user:
            out.append(_with(f, "user", "the user id"))
        elif not repeated:
            out.append(_with(f, "user", "no item id repeats in the sample, so no field can be shown to be the item's"))
        elif all(len({json.dumps(cols[f.name][i], sort_keys=True) for i in rows}) == 1 for rows in repeated):
            out.append(_with(f, "item", f"constant for each item id ({len(repeated)} items seen twice or more)"))
        else:
            out.append(_with(f, "user", "varies within an item id: a user or context field"))
    return out


def _with(f: FieldGuess, tower: str, why: str) -> FieldGuess:
    return dataclasses.replace(f, why=f"{f.why}; {tower} tower: {why}", tower=tower)


def _optional_if_absent(g: FieldGuess, values: list[Any], records: int, *, keyed: bool) -> FieldGuess:
    """An input field some records of the sample lack is proposed optional: the parsers count and,
    past the schema's share, refuse a record lacking a required field (logrecords.absent_fields)."""
    absent = sum(v is None for v in values) + records - len(values)
    if g.role not in ("dense", "sparse") or keyed or not absent:
        return g
    return dataclasses.replace(g, optional=True, why=f"{g.why}; absent from {absent} of {records} records -> "
                               "optional")
