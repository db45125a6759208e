"""JSON-lines parser under a declared schema.

A record is one JSON object: the label (0..1), dense fields (numbers; absent = 0), sparse
slots (a scalar or a list of strings/integers), an optional event time (epoch seconds) and
the user/item slots. JSON decoding is inherently per record (``json.loads`` in C); columns
are then built per field with C-level ``map``/numpy conversions, and ids are hashed by the
batch kernel of :mod:`streaming.hashing`. Criteo TSV is the fast path; this one favours
flexibility.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np

from streaming.batch import Batch
from streaming.config import HashKind, SchemaConfig
from streaming.hashing import hash_tokens
from streaming.rejects import Rejected, RejectReason

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


_INVALID = object()


def _numbers(col: list[Any]) -> tuple[np.ndarray, np.ndarray]:
    """float64 column (None -> NaN) and a mask of values that are not numbers."""
    try:
        arr = np.array(col, dtype=np.float64)
        if arr.ndim == 1:
            bad = np.zeros(len(col), dtype=bool)
            return arr, bad
    except (ValueError, TypeError):
        pass
    ok = [v is None or (isinstance(v, int | float) and not isinstance(v, bool)) for v in col]
    bad = ~np.array(ok, dtype=bool)
    arr = np.array([v if good else None for v, good in zip(col, ok, strict=True)], dtype=np.float64)
    return arr, bad


def _token(v: Any) -> bytes | None:
    if isinstance(v, str):
        return v.encode()
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

    def parse(self, values: Sequence[bytes]) -> tuple[Batch, list[Rejected]]:
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
            elif d is not _INVALID and not isinstance(d, dict):
                reasons[i] = (RejectReason.SCHEMA, f"expected a JSON object, got {type(d).__name__}")
        docs = [d if isinstance(d, dict) else {} for d in docs]

        s = self.schema
        label_col = [d.get(s.label) for d in docs]
        labels, bad = _numbers(label_col)
        bad |= np.isnan(labels) | (labels < 0) | (labels > 1)
        self._flag(reasons, bad, RejectReason.BAD_LABEL, f"field '{s.label}': label must be a number in [0, 1]")

        dense = np.zeros((n, len(s.dense_names)), dtype=np.float64)
        for j, name in enumerate(s.dense_names):
            col, bad = _numbers([d.get(name) for d in docs])
            dense[:, j] = col
            self._flag(reasons, bad, RejectReason.BAD_DENSE, f"field '{name}': non-numeric dense value")
        dense = np.nan_to_num(dense, nan=0.0)

        event_time = None
        if s.event_time is not None:
            event_time, bad = _numbers([d.get(s.event_time) for d in docs])
            self._flag(reasons, bad, RejectReason.SCHEMA, f"field '{s.event_time}': event time must be a number")

        slots = {slot.name: self._slot(slot.name, slot.hash, docs, reasons) for slot in s.sparse_slots}

        rejected = [Rejected(i, reason, detail, values[i]) for i, (reason, detail) in sorted(reasons.items())]
        keep = np.ones(n, dtype=bool)
        keep[list(reasons)] = False
        batch = Batch(
            labels=labels.astype(np.float32),
            dense=dense.astype(np.float32),
            slots=slots,
            event_time=event_time,
            user_id=None if s.user_id is None else self._first_ids(slots[s.user_id]),
            item_id=None if s.item_id is None else self._first_ids(slots[s.item_id]),
        )
        return (batch if keep.all() else batch.take(np.flatnonzero(keep))), rejected

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
        values, offsets = ragged
        has = offsets[1:] > offsets[:-1]
        out = np.zeros(offsets.shape[0] - 1, dtype=np.uint64)
        out[has] = values[offsets[:-1][has]]
        return out
