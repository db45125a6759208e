"""Propose a record schema from a sample of a file (``streamrec schema infer``).

The first ``sample`` records (10,000 by default) of a JSON-lines, CSV or Parquet file are read
and every column is classified, each guess with the reason for it:

- the label: ``--label``, else a column named label/click/clicked/y/target; numbers in [0, 1];
- an event time: numbers that all fall in Unix seconds 2000..2100 (preferred when the name
  says time/ts/timestamp/date, never a column named like an id);
- sparse, hash ``int``: non-negative integers below 2**56 named like an id (``id``, ``*_id``,
  ``*Id``, ``user``, ``item``, ...), the ``--user``/``--item`` columns, or integers with few distinct values
  (<= ``FEW_DISTINCT``): ids stay lossless;
- sparse, hash ``fnv1a``: strings (and mixes of strings and integers, hashed as their text);
- a list slot: lists of strings or integers (JSON, Parquet), or CSV text split on ``|`` or ``;``;
- dense: the other numbers (continuous values);
- ignored, with the reason: booleans, nested objects, floats mixed with text, empty columns.

With a user and an item column, :func:`propose_towers` puts a sparse field in the item tower
when it is constant for each item id of the sample (the item's own attributes), else in the
user tower; dense fields feed the user tower (the item tower reads none). The sample is held
in Python values: this is a one-off, bounded read, not a hot path.
"""

from __future__ import annotations

import csv
import json
import math
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.errors import InvalidInput
from logrecords.file_formats import format_of, line_blocks
from logrecords.hashing import SLOT_SHIFT
from logrecords.schema_config import HashKind, SchemaConfig, SlotConfig, SlotKind

DEFAULT_SAMPLE = 10_000
FEW_DISTINCT = 32
LABEL_NAMES = ("label", "click", "clicked", "is_click", "clk", "y", "target")
UNIX_LO, UNIX_HI = 946_684_800, 4_102_444_800  # 2000-01-01 .. 2100-01-01 in seconds
LIST_SEPARATORS = ("|", ";")
_INT = re.compile(r"-?[0-9]+")
_NUMBER = re.compile(r"-?[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?")
_TIME_NAME = re.compile(r"(^|_)(ts|time|timestamp|date|datetime|event_time)$|time$|At$", re.IGNORECASE)
_ID_NAME = re.compile(r"(^id$|_id$|(?-i:[a-z]Id)$|(^|_)(user|item|uid|iid|product|movie|ad|campaign|query)$)",
                      re.IGNORECASE)


@dataclass(frozen=True)
class FieldGuess:
    """What one column was taken for, and why (the YAML comment)."""

    name: str
    role: str  # label | event_time | dense | sparse | ignored
    why: str
    hash: HashKind | None = None
    separator: str | None = None
    tower: str | None = None  # two_tower: user | item


@dataclass
class Inference:
    """The proposed schema, with one guess per column of the sample."""

    path: Path
    format: str
    records: int
    fields: list[FieldGuess]
    delimiter: str = ","
    columns: tuple[str, ...] = ()
    user: str | None = None
    item: str | None = None
    notes: list[str] = field(default_factory=list)

    def schema(self) -> SchemaConfig:
        label = next(f.name for f in self.fields if f.role == "label")
        etime = next((f.name for f in self.fields if f.role == "event_time"), None)
        slots = [SlotConfig(name=f.name, kind=SlotKind.DENSE) for f in self.fields if f.role == "dense"]
        slots += [SlotConfig(name=f.name, kind=SlotKind.SPARSE, hash=f.hash or HashKind.FNV1A, separator=f.separator)
                  for f in self.fields if f.role == "sparse"]
        return SchemaConfig(format=self.format, label=label, slots=tuple(slots), event_time=etime,  # type: ignore[arg-type]
                            user_id=self.user, item_id=self.item, delimiter=self.delimiter, columns=self.columns)


def read_sample(path: Path, fmt: str, n: int) -> tuple[dict[str, list[Any]], dict[str, Any]]:
    """Columns (name -> values, None where absent) of the first ``n`` records, and format facts."""
    if fmt == "parquet":
        return _parquet_sample(path, n)
    lines: list[bytes] = []
    for _, block in line_blocks(path, min(n + 1, 8192)):
        lines += block
        if len(lines) > n:
            break
    if fmt == "csv":
        return _csv_sample(lines, n)
    if fmt != "json":
        raise InvalidInput(f"schema infer reads json, csv or parquet files, not {fmt}")
    docs, bad = [], 0
    for raw in lines[:n]:
        try:
            d = json.loads(raw)
        except ValueError:
            d = None
        if isinstance(d, dict):
            docs.append(d)
        else:
            bad += 1
    names: dict[str, None] = {}
    for d in docs:
        names.update(dict.fromkeys(d))
    return {k: [d.get(k) for d in docs] for k in names}, {"records": len(docs), "bad": bad}


def _sniff_delimiter(header: str) -> str:
    counts = {d: header.count(d) for d in (",", "\t", ";", "|")}
    best = max(counts, key=lambda d: counts[d])
    return best if counts[best] else ","


def _csv_sample(lines: list[bytes], n: int) -> tuple[dict[str, list[Any]], dict[str, Any]]:
    if not lines:
        raise InvalidInput("the file is empty: a CSV file needs a header row")
    header_text = lines[0].rstrip(b"\r\n").decode("utf-8-sig", "replace")
    delim = _sniff_delimiter(header_text)
    header = [h.strip() for h in next(csv.reader([header_text], delimiter=delim))]
    rows, bad = [], 0
    text = (ln.rstrip(b"\r\n").decode("utf-8", "replace") for ln in lines[1 : n + 1])
    for row in csv.reader(text, delimiter=delim):
        if len(row) == len(header):
            rows.append(row)
        else:
            bad += 1
    cols = {h: [(r[c] if r[c] != "" else None) for r in rows] for c, h in enumerate(header)}
    return cols, {"records": len(rows), "bad": bad, "delimiter": delim, "columns": tuple(header)}


def _parquet_sample(path: Path, n: int) -> tuple[dict[str, list[Any]], dict[str, Any]]:
    from logrecords.parquet_reader import require_pyarrow

    pa = require_pyarrow()
    try:
        f = pa.parquet.ParquetFile(path)
    except (pa.ArrowInvalid, OSError) as exc:
        raise InvalidInput(f"{path}: not a readable Parquet file: {exc}") from None
    rb = next(f.iter_batches(batch_size=n), None)
    if rb is None:
        return {name: [] for name in f.schema_arrow.names}, {"records": 0, "bad": 0}
    cols: dict[str, list[Any]] = {}
    for name in rb.schema.names:
        arr = rb.column(name)
        if pa.types.is_dictionary(arr.type):
            arr = arr.dictionary_decode()
        if pa.types.is_timestamp(arr.type):  # as the reader sees it: float seconds
            unit = {"s": 1, "ms": 1e3, "us": 1e6, "ns": 1e9}[arr.type.unit]
            cols[name] = [None if v is None else v / unit for v in arr.cast(pa.int64()).to_pylist()]
        else:
            cols[name] = arr.to_pylist()
    return cols, {"records": rb.num_rows, "bad": 0}


def _kind(v: Any, csv_text: bool) -> str:
    """int | float | str | bool | list | other, for one non-null value (CSV text read as numbers)."""
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int):
        return "int"
    if isinstance(v, float):
        return "float" if math.isfinite(v) else "other"
    if isinstance(v, str):
        if csv_text and _INT.fullmatch(v):
            return "int"
        if csv_text and _NUMBER.fullmatch(v):
            return "float"
        return "str"
    if isinstance(v, list):
        return "list"
    return "other"


def _num(v: Any) -> float:
    return float(v)


def _is_id_int(values: list[Any]) -> bool:
    return all(0 <= int(v) < (1 << SLOT_SHIFT) for v in values)


def _guess(name: str, values: list[Any], *, csv_text: bool, forced_sparse: bool) -> FieldGuess:
    present = [v for v in values if v is not None]
    if not present:
        return FieldGuess(name, "ignored", "no value in the sample")
    kinds = Counter(_kind(v, csv_text) for v in present)
    distinct = len({json.dumps(v, sort_keys=True) for v in present})
    if kinds.keys() == {"list"}:
        elems = [e for v in present for e in v]
        ek = Counter(_kind(e, False) for e in elems if e is not None)
        if not ek or ek.keys() <= {"str", "int"}:
            ints = ek.keys() == {"int"} and _is_id_int(elems)
            return FieldGuess(name, "sparse", f"lists of {'integer ids' if ints else 'strings'} -> a list slot "
                              f"({len(elems)} ids in {len(present)} records)",
                              hash=HashKind.INT if ints else HashKind.FNV1A)
        return FieldGuess(name, "ignored", f"lists of {', '.join(sorted(ek))}: only strings or integers are ids")
    if "other" in kinds or "list" in kinds:
        return FieldGuess(name, "ignored", "nested or mixed values: not a flat field")
    if "bool" in kinds:
        return FieldGuess(name, "ignored", "booleans are neither numbers nor ids to the parsers (write 0/1 to use it)")
    if "str" in kinds:
        if "float" in kinds:
            return FieldGuess(name, "ignored", "floats mixed with text")
        if csv_text:
            for sep in LIST_SEPARATORS:
                if sum(sep in v for v in present) >= max(1, len(present) // 5):
                    return FieldGuess(name, "sparse", f"text holding {sep!r}-separated values in "
                                      f"{sum(sep in v for v in present)} of {len(present)} records -> a list slot",
                                      hash=HashKind.FNV1A, separator=sep)
        what = "strings" if "int" not in kinds else "strings and integers"
        return FieldGuess(name, "sparse", f"{what}, {distinct} distinct in the sample -> sparse, fnv1a hash",
                          hash=HashKind.FNV1A)
    if "float" in kinds:
        return FieldGuess(name, "dense", f"numbers with fractions, {distinct} distinct -> dense")
    ints = [int(v) for v in present]
    id_like = bool(_ID_NAME.search(name)) or forced_sparse
    if id_like or distinct <= FEW_DISTINCT:
        why = ("integer ids" if id_like else f"integers with few distinct values ({distinct} <= {FEW_DISTINCT})")
        if _is_id_int(ints):
            return FieldGuess(name, "sparse", f"{why} -> sparse, int hash (lossless)", hash=HashKind.INT)
        return FieldGuess(name, "sparse", f"{why}, some negative or >= 2**56 -> sparse, fnv1a hash of the text",
                          hash=HashKind.FNV1A)
    return FieldGuess(name, "dense", f"integers with many distinct values ({distinct}) -> dense (counts, amounts)")


def _time_like(values: list[Any], csv_text: bool) -> bool:
    present = [v for v in values if v is not None]
    if not present or any(_kind(v, csv_text) not in ("int", "float") for v in present):
        return False
    nums = [_num(v) for v in present]
    return all(UNIX_LO <= x < UNIX_HI for x in nums)


def infer_schema(path: str | Path, *, fmt: str | None = None, label: str | None = None, user: str | None = None,
                 item: str | None = None, sample: int = DEFAULT_SAMPLE) -> Inference:
    """Read the first ``sample`` records of ``path`` and propose a schema (see the module doc)."""
    path = Path(path)
    if not path.is_file():
        raise InvalidInput(f"no such file: {path}")
    fmt = fmt or format_of(path)
    if fmt not in ("json", "csv", "parquet"):
        raise InvalidInput(f"{path}: cannot tell the format from the extension: pass --format json|csv|parquet")
    cols, facts = read_sample(path, fmt, sample)
    if not facts["records"]:
        raise InvalidInput(f"{path}: no readable record in the first {sample} (skipped {facts['bad']})")
    for role, name in (("--label", label), ("--user", user), ("--item", item)):
        if name is not None and name not in cols:
            raise InvalidInput(f"{role} {name!r} is not a column of {path.name}; columns: {sorted(cols)}")
    if label is None:
        label = next((c for c in cols if c.lower() in LABEL_NAMES), None)
        if label is None:
            raise InvalidInput(f"no label column among {sorted(cols)}: pass --label COL")
        label_why = f"named '{label}'"
    else:
        label_why = "--label"
    csv_text = fmt == "csv"
    lvals = [v for v in cols[label] if v is not None]
    try:
        nums = [_num(v) for v in lvals if _kind(v, csv_text) in ("int", "float")]
    except ValueError:
        nums = []
    if len(nums) != len(lvals) or not nums or not all(0.0 <= x <= 1.0 for x in nums):
        bad = next((v for v in lvals if _kind(v, csv_text) not in ("int", "float") or not 0 <= _num(v) <= 1), None)
        raise InvalidInput(f"label column '{label}' must hold numbers in [0, 1]; the sample has {bad!r}")
    positive = sum(x > 0.5 for x in nums) / len(nums)
    fields = [FieldGuess(label, "label", f"the label ({label_why}): {positive:.1%} positive in the sample")]
    names = [c for c in cols if c != label]
    etime = None
    candidates = [c for c in names
                  if c not in (user, item) and not _ID_NAME.search(c) and _time_like(cols[c], csv_text)]
    candidates.sort(key=lambda c: not _TIME_NAME.search(c))
    if candidates:
        etime = candidates[0]
    for c in names:
        if c == etime:
            lo = min(_num(v) for v in cols[c] if v is not None)
            hi = max(_num(v) for v in cols[c] if v is not None)
            fields.append(FieldGuess(c, "event_time", f"numbers in the Unix-seconds range ({lo:.0f}..{hi:.0f}) "
                                     "-> the event time"))
            continue
        g = _guess(c, cols[c], csv_text=csv_text, forced_sparse=c in (user, item))
        if c in (user, item) and g.role != "sparse":
            raise InvalidInput(f"the {'user' if c == user else 'item'} column '{c}' is not an id field: {g.why}")
        fields.append(g)
    inf = Inference(path=path, format=fmt, records=facts["records"], fields=fields,
                    delimiter=facts.get("delimiter", ","), columns=facts.get("columns", ()), user=user, item=item)
    if facts["bad"]:
        inf.notes.append(f"{facts['bad']} records of the sample could not be read and were left out")
    if not any(f.role == "sparse" for f in fields):
        raise InvalidInput(f"{path}: no sparse field found (ids, strings, few-valued integers): a model needs one")
    if user is not None and item is not None:
        inf.fields = propose_towers(inf.fields, cols, user=user, item=item)
    return inf


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
    return FieldGuess(f.name, f.role, f"{f.why}; {tower} tower: {why}", hash=f.hash, separator=f.separator, tower=tower)
