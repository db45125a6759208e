"""JSON-lines parser under a declared schema.

A record is one JSON object: the label (a number in [0, 1]), dense fields (numbers; absent or
null = 0), sparse slots (a string or integer, or a flat list of them), an optional event time
(a number in ``schema.event_time_unit``, or ISO-8601 text, which takes the reference path) and
the user/item slots. Unknown keys are ignored. A batch is scanned by the
numba kernel of :mod:`logrecords.json_scan` straight into columns; the few records it cannot
decide (escaped strings, exponents, nested values, syntax errors) go through ``json.loads``
here, the reference path, which defines the semantics. The batch keeps the input's order.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np

from logrecords.batch import Batch
from logrecords.criteo import join_messages
from logrecords.event_time import ISO8601, iso_seconds, numbers_to_seconds
from logrecords.hashing import KIND_CODE, hash_tokens
from logrecords.json_scan import FALLBACK, OK, REJECT, ROLE_DENSE, ROLE_LABEL, ROLE_SPARSE, ROLE_TIME, scan_json
from logrecords.reference_fallback import with_reference
from logrecords.rejects import Rejected, RejectReason
from logrecords.schema_config import HashKind, SchemaConfig
from logrecords.slot_columns import first_ids, group_by_slot

_SLOT_REASON = {
    HashKind.FNV1A: RejectReason.BAD_TEXT,
    HashKind.HEX: RejectReason.BAD_HEX,
    HashKind.INT: RejectReason.BAD_INT,
}


def _loads(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return _INVALID
    except RecursionError:  # a few KB of "[[[[..." exhaust the interpreter's stack: a bad record, not a crash
        return _TOO_DEEP


_INVALID = object()
_TOO_DEEP = object()
_F32_MAX = float(np.finfo(np.float32).max)


def _as_float(v: Any) -> float | None:
    # Only JSON numbers count (bool is an int subclass in Python; strings are not numbers).
    if type(v) is float or type(v) is int:
        try:
            return float(v)
        except OverflowError:
            return None
    return None


def _numbers(col: list[Any]) -> tuple[np.ndarray, np.ndarray]:
    """float64 column (None -> NaN) and a mask of values that are not numbers."""
    conv = [_as_float(v) for v in col]
    bad = np.array([c is None and v is not None for c, v in zip(conv, col, strict=True)], dtype=bool)
    return np.array([np.nan if c is None else c for c in conv], dtype=np.float64).reshape(len(col)), bad


def _token(v: Any) -> bytes | None:
    if isinstance(v, str):
        return v.encode("utf-8", "surrogatepass")  # JSON allows lone surrogates ("\ud800")
    if isinstance(v, int) and not isinstance(v, bool):
        return str(v).encode()
    return None


class JsonLinesParser:
    """Parses batches of JSON objects (one per message) under a json-format schema."""

    def __init__(self, schema: SchemaConfig, *, max_message_bytes: int = 65536) -> None:
        if schema.format != "json":
            raise ValueError("JsonLinesParser needs a json-format schema")
        self.schema = schema
        self.max_message_bytes = max_message_bytes
        self._slot_ids = schema.slot_ids()
        # Field table of the kernel, in reject-precedence order: label, dense, event time, sparse.
        sparse = schema.sparse_slots
        fields: list[tuple[str, int, int]] = [(schema.label_field, ROLE_LABEL, 0)]
        fields += [(name, ROLE_DENSE, j) for j, name in enumerate(schema.dense_names)]
        if schema.event_time is not None:
            fields.append((schema.event_time, ROLE_TIME, 0))
        fields += [(slot.name, ROLE_SPARSE, j) for j, slot in enumerate(sparse)]
        self._fields = fields
        keys = [name.encode() for name, _, _ in fields]
        self._key_buf, self._key_bounds = join_messages(keys)
        self._role = np.array([r for _, r, _ in fields], dtype=np.int8)
        self._col = np.array([c for _, _, c in fields], dtype=np.int64)
        self._slot_kind = np.array([KIND_CODE[slot.hash] for slot in sparse], dtype=np.int64)
        self._slot_id = np.array([self._slot_ids[slot.name] for slot in sparse], dtype=np.int64)
        self._slot_reason = np.array([_SLOT_REASON[slot.hash] for slot in sparse], dtype=np.int8)
        self._sparse_names = [slot.name for slot in sparse]
        # the kernel's field of each presence field (the first of that name: a name may have two roles)
        first = {}
        for k, (name, _, _) in enumerate(fields):
            first.setdefault(name, k)
        self._presence_col = np.array([first[name] for name in schema.presence_fields], dtype=np.int64)

    def parse(self, values: Sequence[bytes]) -> tuple[Batch, list[Rejected]]:
        """Parse a batch: the kernel for the common shape, the reference path for the rest."""
        if self.schema.event_time is not None and self.schema.event_time_unit == ISO8601:
            return self.parse_reference(values)  # the kernel reads numbers only
        n = len(values)
        buf, bounds = join_messages(values)
        status, reason, bad_field, labels, dense, etime, given, t_row, t_slot, t_id = scan_json(
            buf, bounds, self.max_message_bytes, self._key_buf, self._key_bounds, self._role, self._col,
            self._slot_kind, self._slot_id, self._slot_reason, len(self.schema.dense_names),
            int(np.count_nonzero(buf == 44)) + n,  # at most commas + 1 ids per record
            len({name for name, _, _ in self._fields}) == len(self._fields), *self.schema.label_bounds,
        )
        rejected = [
            Rejected(int(i), RejectReason(int(reason[i])), self._detail(int(reason[i]), int(bad_field[i])), values[i])
            for i in np.flatnonzero(status == REJECT)
        ]
        rows = np.flatnonzero(status == OK)
        flat, base, offsets = group_by_slot(status, t_row, t_slot, t_id, len(self._sparse_names))
        slots = {name: (flat[base[j] : base[j + 1]], offsets[j]) for j, name in enumerate(self._sparse_names)}
        s = self.schema
        batch = Batch(
            labels=s.derive_labels(labels[rows]),
            dense=dense[rows].astype(np.float32),
            slots=slots,
            event_time=None if s.event_time is None else numbers_to_seconds(etime[rows], s.event_time_unit),
            user_id=None if s.user_id is None else self._first_ids(slots[s.user_id]),
            item_id=None if s.item_id is None else self._first_ids(slots[s.item_id]),
            absent=~given[np.ix_(rows, self._presence_col)],
        )
        return with_reference(batch, rejected, rows, np.flatnonzero(status == FALLBACK), values, self.parse_reference)

    def _detail(self, reason: int, field: int) -> str:
        if reason == RejectReason.BAD_LABEL:
            return self.schema.label_problem
        name, role, col = self._fields[field]
        if role == ROLE_DENSE:
            return f"field '{name}': non-numeric dense value"
        if role == ROLE_TIME:
            return f"field '{name}': {self._time_problem()}"
        return f"slot '{name}': value is not a valid {self.schema.sparse_slots[col].hash.value} id"

    def parse_reference(self, values: Sequence[bytes]) -> tuple[Batch, list[Rejected]]:
        """The reference semantics, record by record through ``json.loads`` (slow, exact)."""
        n = len(values)
        reasons: dict[int, tuple[RejectReason, str]] = {}
        sizes = np.fromiter(map(len, values), dtype=np.int64, count=n)
        for i in np.flatnonzero(sizes > self.max_message_bytes):
            reasons[int(i)] = (RejectReason.OVERSIZED, f"message is larger than max_message_bytes ({sizes[i]})")
        docs = [_INVALID if i in reasons else _loads(v) for i, v in enumerate(values)] if reasons else list(
            map(_loads, values)
        )
        for i, d in enumerate(docs):
            if d is _INVALID and i not in reasons:
                reasons[i] = (RejectReason.INVALID_JSON, "not valid JSON")
            elif d is _TOO_DEEP:
                reasons[i] = (RejectReason.INVALID_JSON, "JSON nested too deeply")
            elif d is not _INVALID and not isinstance(d, dict):
                reasons[i] = (RejectReason.SCHEMA, f"expected a JSON object, got {type(d).__name__}")
        docs = [d if isinstance(d, dict) else {} for d in docs]

        s = self.schema
        label_col = [d.get(s.label_field) for d in docs]
        labels, bad = _numbers(label_col)
        lo, hi = s.label_bounds
        bad |= np.isnan(labels) | (labels < lo) | (labels > hi)
        labels[bad] = 0.0
        self._flag(reasons, bad, RejectReason.BAD_LABEL, s.label_problem)

        dense = np.zeros((n, len(s.dense_names)), dtype=np.float64)
        for j, name in enumerate(s.dense_names):
            col, bad = _numbers([d.get(name) for d in docs])
            bad |= np.abs(col) > _F32_MAX  # would be inf after the float32 cast
            col[bad] = 0.0
            dense[:, j] = col
            self._flag(reasons, bad, RejectReason.BAD_DENSE, f"field '{name}': non-numeric dense value")
        dense = np.nan_to_num(dense, nan=0.0)

        event_time = None
        if s.event_time is not None:
            col = [d.get(s.event_time) for d in docs]
            event_time, bad = self._times(col)
            self._flag(reasons, bad, RejectReason.SCHEMA, f"field '{s.event_time}': {self._time_problem()}")

        slots = {slot.name: self._slot(slot.name, slot.hash, docs, reasons) for slot in s.sparse_slots}
        absent = np.array([[d.get(name) is None for name in s.presence_fields] for d in docs],
                          dtype=bool).reshape(n, len(s.presence_fields))

        rejected = [Rejected(i, reason, detail, values[i]) for i, (reason, detail) in sorted(reasons.items())]
        keep = np.ones(n, dtype=bool)
        keep[list(reasons)] = False
        batch = Batch(
            labels=s.derive_labels(labels),
            dense=dense.astype(np.float32),
            slots=slots,
            event_time=event_time,
            user_id=None if s.user_id is None else self._first_ids(slots[s.user_id]),
            item_id=None if s.item_id is None else self._first_ids(slots[s.item_id]),
            absent=absent,
        )
        return (batch if keep.all() else batch.take(np.flatnonzero(keep))), rejected

    def _times(self, col: list[Any]) -> tuple[np.ndarray, np.ndarray]:
        """Seconds since the epoch of an event-time column (absent: NaN) and a mask of values that are no time."""
        unit = self.schema.event_time_unit
        if unit == ISO8601:
            return iso_seconds([v if isinstance(v, str) or v is None else "" for v in col])
        seconds, bad = _numbers(col)
        given = np.fromiter((v is not None for v in col), dtype=bool, count=len(col))
        # NaN and Infinity literals, and 1e400 parsed as inf: times no freshness figure can use (absent is NaN)
        bad |= given & ~np.isfinite(seconds)
        seconds[bad] = np.nan
        return numbers_to_seconds(seconds, unit), bad

    def _time_problem(self) -> str:
        unit = self.schema.event_time_unit
        return ("event time must be ISO-8601 date text" if unit == ISO8601
                else f"event time must be a finite number ({unit} since the epoch)")

    @staticmethod
    def _flag(reasons: dict[int, tuple[RejectReason, str]], bad: np.ndarray, reason: RejectReason, detail: str) -> None:
        for i in np.flatnonzero(bad):
            reasons.setdefault(int(i), (reason, detail))

    def _slot(
        self, name: str, kind: HashKind, docs: list[dict[str, Any]], reasons: dict[int, tuple[RejectReason, str]]
    ) -> tuple[np.ndarray, np.ndarray]:
        col = [d.get(name) for d in docs]
        lists = [v if isinstance(v, list) else ([] if v is None else [v]) for v in col]
        lengths = np.fromiter(map(len, lists), dtype=np.int64, count=len(lists))
        offsets = np.zeros(len(lists) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        raw = [_token(v) for vs in lists for v in vs]
        tokens = [t if t is not None else b"" for t in raw]
        ids, ok = hash_tokens(tokens, slot_id=self._slot_ids[name], kind=kind)
        ok &= np.array([t is not None for t in raw], dtype=bool)
        if not ok.all():
            rows = np.searchsorted(offsets, np.flatnonzero(~ok), side="right") - 1
            bad = np.zeros(len(lists), dtype=bool)
            bad[rows] = True
            self._flag(reasons, bad, _SLOT_REASON[kind], f"slot '{name}': value is not a valid {kind.value} id")
        return ids, offsets

    @staticmethod
    def _first_ids(ragged: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        return first_ids(ragged)
