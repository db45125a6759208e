"""Parquet under a declared schema, column by column through pyarrow (``pip install 'streamrec[parquet]'``).

A record batch becomes a :class:`~logrecords.batch.Batch` without a Python loop over rows:
numeric columns are cast by Arrow, string columns are hashed by a numba kernel straight over
Arrow's offsets and data buffers, integer id columns with the ``int`` hash kind are used as
they are, list columns (``list<string>``, ``list<int>``) become ragged slots. The semantics are
those of the JSON parser for the same values: the label is a number in [0, 1] (null is a reject),
a null dense value is 0, a null slot holds no id, a null inside a list is a reject. A column of
the wrong type (strings where a number is expected, floats or booleans where ids are expected)
rejects every row that has a value there, with the reason. A null, or a column the file lacks
(the label excepted, an error), is an absent field, counted and refused past the schema's share
by :class:`AbsentFieldCheck` from the null masks. Only rejected rows are visited in Python.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from core.errors import ConfigError, InvalidInput
from core.kernel_cache import kernel
from logrecords.absent_fields import AbsentFieldCheck
from logrecords.batch import Batch
from logrecords.csv_lines import SLOT_REASON, slot_detail
from logrecords.event_time import ISO8601, iso_seconds, numbers_to_seconds
from logrecords.hashing import KIND_CODE, SLOT_SHIFT, token_id
from logrecords.rejects import Rejected, RejectReason
from logrecords.schema_config import HashKind, SchemaConfig
from logrecords.slot_columns import first_ids

_F32_MAX = float(np.finfo(np.float32).max)
_UNIT_SECONDS = {"s": 1.0, "ms": 1e3, "us": 1e6, "ns": 1e9}
_NO_FAIL = np.iinfo(np.int32).max


def require_pyarrow() -> Any:
    try:
        import pyarrow as pa
        import pyarrow.compute
        import pyarrow.parquet
    except ImportError:
        raise ConfigError("parquet needs pyarrow: pip install 'streamrec[parquet]'") from None
    return pa


@kernel(nogil=True, error_model="numpy")
def hash_string_column(data: np.ndarray, offsets: np.ndarray, valid: np.ndarray, kind: int,
                       slot_id: int) -> tuple[np.ndarray, np.ndarray]:
    """Ids of an Arrow string column (``data`` bytes, ``offsets[n + 1]``); nulls get no id and are ok."""
    n = offsets.shape[0] - 1
    ids = np.zeros(n, dtype=np.uint64)
    ok = np.ones(n, dtype=np.bool_)
    for i in range(n):
        if valid[i]:
            good, h = token_id(data, offsets[i], offsets[i + 1], kind, slot_id)
            ids[i] = h
            ok[i] = good
    return ids, ok


def _valid(arr: Any) -> np.ndarray:
    if arr.null_count == 0:
        return np.ones(len(arr), dtype=np.bool_)
    return arr.is_valid().to_numpy(zero_copy_only=False)


def _event_seconds(arr: Any, unit: str) -> tuple[np.ndarray, np.ndarray]:
    """Seconds since the epoch of an event-time column: a timestamp or date whatever the unit, else numbers in
    ``unit`` or ISO-8601 strings (null -> NaN), and a mask of rows that hold no such time."""
    pa = require_pyarrow()
    t = arr.type
    if pa.types.is_timestamp(t) or pa.types.is_date(t):
        return _numeric(arr)
    if unit == ISO8601:
        if pa.types.is_string(t) or pa.types.is_large_string(t):
            return iso_seconds(arr.to_pylist())
        return np.full(len(arr), np.nan), _valid(arr)
    if pa.types.is_integer(t):  # nanoseconds pass float64's exact range: an unchecked cast, rounded below a microsecond
        arr = arr.cast(pa.float64(), safe=False)
    seconds, bad = _numeric(arr)
    return numbers_to_seconds(seconds, unit), bad


def _numeric(arr: Any) -> tuple[np.ndarray, np.ndarray]:
    """float64 values (null -> NaN) and a mask of rows whose value is not a number (wrong type)."""
    pa = require_pyarrow()
    t = arr.type
    if pa.types.is_date(t):  # a day is its midnight, UTC: a date column can be the event time
        arr = arr.cast(pa.timestamp("s"))
        t = arr.type
    if pa.types.is_timestamp(t):
        secs = arr.cast(pa.int64()).cast(pa.float64()).fill_null(np.nan).to_numpy(zero_copy_only=False)
        return secs / _UNIT_SECONDS[t.unit], np.zeros(len(arr), dtype=bool)
    if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t):
        vals = arr.cast(pa.float64()).fill_null(np.nan).to_numpy(zero_copy_only=False)
        return np.asarray(vals, dtype=np.float64), np.zeros(len(arr), dtype=bool)
    if pa.types.is_null(t):
        return np.full(len(arr), np.nan), np.zeros(len(arr), dtype=bool)
    return np.full(len(arr), np.nan), _valid(arr)


def _flat_ids(arr: Any, kind: HashKind, slot_id: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(ids, ok, present) of a flat column: present = has a value; ok = the value is a valid id."""
    pa = require_pyarrow()
    t = arr.type
    if pa.types.is_dictionary(t):
        arr = arr.dictionary_decode()
        t = arr.type
    n = len(arr)
    present = _valid(arr)
    if pa.types.is_integer(t) and kind is HashKind.INT:  # the integer is the id: no text, no hashing
        v = arr.fill_null(0).to_numpy(zero_copy_only=False)
        ok = v < (1 << SLOT_SHIFT) if v.dtype.kind == "u" else (v >= 0) & (v < (1 << SLOT_SHIFT))
        ids = np.where(ok, v, 0).astype(np.uint64) | (np.uint64(slot_id) << np.uint64(SLOT_SHIFT))
        return ids, ok | ~present, present
    if pa.types.is_integer(t):
        arr, t = arr.cast(pa.string()), pa.string()  # fnv1a / hex of the decimal text, as JSON integers
    if hasattr(pa.types, "is_string_view") and pa.types.is_string_view(t):
        arr, t = arr.cast(pa.large_string()), pa.large_string()
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        bufs = arr.buffers()
        off_type = np.int64 if pa.types.is_large_string(t) else np.int32
        offsets = np.frombuffer(bufs[1], dtype=off_type)[arr.offset : arr.offset + n + 1]
        data = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None else np.zeros(0, dtype=np.uint8)
        ids, ok = hash_string_column(data, offsets, present, KIND_CODE[kind], slot_id)
        return ids, ok, present
    return np.zeros(n, dtype=np.uint64), ~present, present  # floats, booleans, ...: not ids


def _slot_column(arr: Any, kind: HashKind, slot_id: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(values, offsets[n + 1], bad row mask) of one sparse column, flat or list."""
    pa = require_pyarrow()
    t = arr.type
    n = len(arr)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        valid = _valid(arr)
        offsets = np.asarray(arr.offsets.to_numpy(zero_copy_only=False), dtype=np.int64)
        starts = offsets[:-1]
        lengths = np.where(valid, offsets[1:] - starts, 0)
        new_offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(lengths, out=new_offsets[1:])
        idx = np.repeat(starts - new_offsets[:-1], lengths) + np.arange(int(new_offsets[-1]), dtype=np.int64)
        ids, ok, present = _flat_ids(arr.values, kind, slot_id)
        ids, ok = ids[idx], (ok & present)[idx]  # a null inside a list is not an id
        row_of = np.repeat(np.arange(n), lengths)
        bad = np.zeros(n, dtype=bool)
        bad[row_of[~ok]] = True
        return ids, new_offsets, bad
    ids, ok, present = _flat_ids(arr, kind, slot_id)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(present, out=offsets[1:])
    return ids[present], offsets, ~ok


class ParquetReader:
    """Batches of a Parquet file under a parquet-format (or any) schema; no Python loop over rows."""

    def __init__(self, schema: SchemaConfig, *, use_threads: bool = False) -> None:
        require_pyarrow()
        self.schema = schema
        self.use_threads = use_threads
        self.check = AbsentFieldCheck(schema)
        self._slot_ids = schema.slot_ids()
        self.columns = [schema.label_field, *schema.dense_names, *(s.name for s in schema.sparse_slots)]
        if schema.event_time is not None:
            self.columns.append(schema.event_time)

    def blocks(self, path: Path, batch_size: int) -> Iterator[tuple[int, Any]]:
        """(first row number, 1-based; record batch of at most ``batch_size`` rows) of the schema's columns."""
        pa = require_pyarrow()
        try:
            f = pa.parquet.ParquetFile(path)
        except (pa.ArrowInvalid, OSError) as exc:
            raise InvalidInput(f"{path}: not a readable Parquet file: {exc}") from None
        names = f.schema_arrow.names
        if self.schema.label_field not in names:
            raise InvalidInput(f"{path}: Parquet columns lack the label field '{self.schema.label_field}'",
                               detail={"missing": [self.schema.label_field]})
        columns = [c for c in self.columns if c in names]  # a missing field reads as all null: counted absent
        first = 1
        for rb in f.iter_batches(batch_size=batch_size, columns=columns, use_threads=self.use_threads):
            yield first, rb
            first += rb.num_rows

    def parse(self, rb: Any) -> tuple[Batch, list[Rejected]]:
        """One record batch (or table) -> (Batch of the good rows, rejected rows with reasons)."""
        s = self.schema
        n = rb.num_rows
        if s.label_field not in rb.schema.names:
            raise InvalidInput(f"Parquet columns lack the label field '{s.label_field}'",
                               detail={"missing": [s.label_field]})
        pa = require_pyarrow()
        cols = {name: rb.column(name) if name in rb.schema.names else pa.nulls(n) for name in self.columns}
        absent = np.column_stack([~_valid(_chunk(cols[name])) for name in s.presence_fields]) \
            if s.presence_fields else np.zeros((n, 0), dtype=bool)
        rank = np.full(n, _NO_FAIL, dtype=np.int32)  # first failing field in schema order (as the JSON parser)
        why: list[tuple[RejectReason, str]] = []

        def flag(bad: np.ndarray, r: int, reason: RejectReason, detail: str) -> None:
            if bad.any():
                take = bad & (rank > r)
                rank[take] = r
                why.append((reason, detail))
                code[take] = len(why) - 1

        code = np.zeros(n, dtype=np.int32)
        labels, bad = _numeric(_chunk(cols[s.label_field]))
        lo, hi = s.label_bounds
        flag(bad | ~((labels >= lo) & (labels <= hi)), 0, RejectReason.BAD_LABEL, s.label_problem)
        dense = np.zeros((n, len(s.dense_names)), dtype=np.float64)
        for j, name in enumerate(s.dense_names):
            col, bad = _numeric(_chunk(cols[name]))
            col = np.nan_to_num(col, nan=0.0, posinf=np.inf, neginf=-np.inf)
            bad |= np.abs(col) > _F32_MAX
            dense[:, j] = np.where(bad, 0.0, col)
            flag(bad, 1 + j, RejectReason.BAD_DENSE, f"field '{name}': non-numeric dense value")
        event_time = None
        if s.event_time is not None:
            event_time, bad = _event_seconds(_chunk(cols[s.event_time]), s.event_time_unit)
            flag(bad, 1 + len(s.dense_names), RejectReason.SCHEMA, f"field '{s.event_time}': event time must be "
                 f"{'ISO-8601 date text' if s.event_time_unit == ISO8601 else 'a number'} or a timestamp")
        slots = {}
        for j, slot in enumerate(s.sparse_slots):
            values, offsets, bad = _slot_column(_chunk(cols[slot.name]), slot.hash, self._slot_ids[slot.name])
            slots[slot.name] = (values, offsets)
            flag(bad, 2 + len(s.dense_names) + j, SLOT_REASON[slot.hash], slot_detail(s, slot.name))
        batch = Batch(
            labels=s.derive_labels(np.nan_to_num(labels)),
            dense=dense.astype(np.float32),
            slots=slots,
            event_time=event_time,
            user_id=None if s.user_id is None else first_ids(slots[s.user_id]),
            item_id=None if s.item_id is None else first_ids(slots[s.item_id]),
            absent=absent,
        )
        failed = np.flatnonzero(rank != _NO_FAIL)
        rejected = [Rejected(int(i), *why[code[i]], _raw(rb, int(i))) for i in failed]
        if failed.size:
            keep = np.ones(n, dtype=bool)
            keep[failed] = False
            batch = batch.take(np.flatnonzero(keep))
        return self.check.check(batch, rejected, _RawRows(rb))


def _chunk(col: Any) -> Any:
    """A record batch's column is one array; a table's is chunked: join it."""
    return col.combine_chunks() if hasattr(col, "combine_chunks") else col


def _raw(rb: Any, i: int) -> bytes:
    """A rejected row as JSON text (what a dead-letter consumer reads)."""
    return json.dumps(rb.slice(i, 1).to_pylist()[0], default=str).encode()


class _RawRows(Sequence[bytes]):
    """The rows of a record batch as JSON text, made only for the rows asked for."""

    def __init__(self, rb: Any) -> None:
        self._rb = rb

    def __len__(self) -> int:
        return self._rb.num_rows

    def __getitem__(self, i: Any) -> Any:
        return _raw(self._rb, int(i))
