"""CSV parser under a declared schema: a header row (or ``schema.columns``) maps columns to fields.

A record is one line of ``schema.delimiter``-separated fields. The label is a number in [0, 1];
dense fields are numbers (empty = 0); the event time is a number of epoch seconds (empty =
absent); a sparse field holds one id, or several split on the slot's ``separator`` (empty
pieces are skipped; an empty field holds no id). Columns the schema does not name are ignored.
A row shorter than the header has empty cells at its end; an empty cell is an absent field
(``Batch.absent``, checked by :mod:`logrecords.absent_fields`); a longer row is refused.
Numbers follow ``-?digits[.digits][e[+-]digits]``.

One numba kernel scans a whole batch straight into columns: plain and quoted fields without
escapes. The few records it cannot decide (doubled quotes ``""``, text after a closing quote, an
unclosed quote, exponents, more than 15 significant digits) go through Python's :mod:`csv` here,
the reference path, which defines the semantics; the batch keeps the input's order, as in
:mod:`logrecords.json_lines`. A quoted field cannot span lines: files are read line by line.
Rejects use the same reasons and precedence as the JSON parser (label, dense, event time, sparse).
"""

from __future__ import annotations

import csv
import re
from collections.abc import Sequence

import numpy as np

from core.errors import InvalidInput
from core.kernel_cache import kernel
from logrecords.batch import Batch
from logrecords.criteo import join_messages
from logrecords.event_time import ISO8601, iso_seconds, numbers_to_seconds
from logrecords.hashing import KIND_CODE, hash_tokens, token_id
from logrecords.reference_fallback import with_reference
from logrecords.rejects import Rejected, RejectReason
from logrecords.schema_config import HashKind, SchemaConfig
from logrecords.slot_columns import first_ids, group_by_slot

ROLE_IGNORE, ROLE_LABEL, ROLE_DENSE, ROLE_TIME, ROLE_SPARSE = 0, 1, 2, 3, 4
OK, REJECT, FALLBACK = 0, 1, 2
NUM_OK, NUM_BAD, NUM_SLOW = 0, 1, 2

_OVERSIZED = np.int8(RejectReason.OVERSIZED)
_FIELD_COUNT = np.int8(RejectReason.FIELD_COUNT)
_BAD_LABEL = np.int8(RejectReason.BAD_LABEL)
_BAD_DENSE = np.int8(RejectReason.BAD_DENSE)
_SCHEMA = np.int8(RejectReason.SCHEMA)
_F32_MAX = float(np.finfo(np.float32).max)
_POW10 = np.array([10.0**k for k in range(23)])
_NUMBER = re.compile(r"-?[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?")
SLOT_REASON = {
    HashKind.FNV1A: RejectReason.BAD_TEXT,
    HashKind.HEX: RejectReason.BAD_HEX,
    HashKind.INT: RejectReason.BAD_INT,
}


@kernel(inline="always", error_model="numpy")
def _number(buf: np.ndarray, p: int, e: int) -> tuple[int, float]:
    """(NUM_OK | NUM_BAD | NUM_SLOW, value) of buf[p:e]; exact like Python's float() on the fast path."""
    neg = p < e and buf[p] == 45
    if neg:
        p += 1
    if p >= e or not (48 <= buf[p] <= 57):
        return NUM_BAD, 0.0
    mant = 0
    digits = 0
    exp10 = 0
    while p < e and 48 <= buf[p] <= 57:
        if mant > 0 or buf[p] != 48:
            digits += 1
        mant = mant * 10 + (buf[p] - 48) if digits <= 15 else mant
        p += 1
    if p < e and buf[p] == 46:
        p += 1
        if p >= e or not (48 <= buf[p] <= 57):
            return NUM_BAD, 0.0
        while p < e and 48 <= buf[p] <= 57:
            if mant > 0 or buf[p] != 48:
                digits += 1
            mant = mant * 10 + (buf[p] - 48) if digits <= 15 else mant
            exp10 -= 1
            p += 1
    if p < e and (buf[p] == 101 or buf[p] == 69):
        return NUM_SLOW, 0.0  # exponents: the reference path decides
    if p != e:
        return NUM_BAD, 0.0
    if digits > 15 or exp10 < -22:
        return NUM_SLOW, 0.0  # beyond the exactly rounded fast path
    v = float(mant) / _POW10[-exp10] if exp10 < 0 else float(mant)
    return NUM_OK, -v if neg else v


@kernel(nogil=True, error_model="numpy")
def scan_csv(  # one pass over the bytes of a batch
    buf: np.ndarray, bounds: np.ndarray, max_bytes: int, delim: int,
    role: np.ndarray, col: np.ndarray, n_dense: int,
    slot_kind: np.ndarray, slot_id: np.ndarray, slot_reason: np.ndarray, slot_sep: np.ndarray, cap: int,
    label_lo: float = 0.0, label_hi: float = 1.0,
) -> tuple:
    # ``cap`` bounds the ids of the batch (one per single-valued slot and record, plus separators), so the
    # id arrays never grow: rebinding arrays inside the loop would cost numba reference counting per id.
    n = bounds.shape[0] - 1
    n_cols = role.shape[0]
    status = np.zeros(n, dtype=np.int8)
    reason = np.zeros(n, dtype=np.int8)
    bad_field = np.full(n, -1, dtype=np.int32)
    labels = np.zeros(n)
    dense = np.zeros((n, n_dense))
    etime = np.full(n, np.nan)
    empty = np.zeros((n, n_cols), dtype=np.bool_)
    fs = np.zeros(n_cols, dtype=np.int64)
    fe = np.zeros(n_cols, dtype=np.int64)
    t_row = np.empty(cap, dtype=np.int64)
    t_slot = np.empty(cap, dtype=np.int32)
    t_id = np.empty(cap, dtype=np.uint64)
    m = 0
    for i in range(n):
        s, e = bounds[i], bounds[i + 1]
        if e - s > max_bytes:
            status[i] = REJECT
            reason[i] = _OVERSIZED
            continue
        while e > s and (buf[e - 1] == 10 or buf[e - 1] == 13):
            e -= 1
        # Field bounds (quotes removed); anything unusual goes to the reference path.
        count = 0
        p = s
        slow = False
        while True:
            if p < e and buf[p] == 34:
                q = p + 1
                while q < e and buf[q] != 34:
                    q += 1
                if q >= e or (q + 1 < e and buf[q + 1] != delim):
                    slow = True  # unclosed quote, doubled quote or text after the closing quote
                    break
                a, b, p = p + 1, q, q + 1
            else:
                q = p
                while q < e and buf[q] != delim:
                    if buf[q] == 10 or buf[q] == 13:
                        slow = True  # a line break inside the record: csv.reader refuses it (reference path)
                    q += 1  # a quote inside an unquoted field is text, as csv.reader reads it
                a, b, p = p, q, q
            if count < n_cols:
                fs[count] = a
                fe[count] = b
            count += 1
            if p >= e:
                break
            p += 1  # the delimiter
        if slow:
            status[i] = FALLBACK
            continue
        if count > n_cols:
            status[i] = REJECT
            reason[i] = _FIELD_COUNT
            bad_field[i] = count
            continue
        for c in range(count, n_cols):  # a short row: its missing cells are empty
            fs[c] = e
            fe[c] = e
        for c in range(n_cols):
            empty[i, c] = fs[c] == fe[c]
        m_row = m
        rank = 1 << 30  # rank of the first failing field in schema order (as the JSON parser)
        for c in range(n_cols):
            r = role[c]
            if r == ROLE_IGNORE:
                continue
            a, b = fs[c], fe[c]
            if r == ROLE_SPARSE:
                j = col[c]
                sep = slot_sep[j]
                t = a
                while t < b:
                    u = t
                    if sep >= 0:
                        while u < b and buf[u] != sep:
                            u += 1
                    else:
                        u = b
                    if u > t:
                        valid, h = token_id(buf, t, u, slot_kind[j], slot_id[j])
                        if valid:
                            t_row[m] = i
                            t_slot[m] = j
                            t_id[m] = h
                            m += 1
                        elif 2 + n_dense + j < rank:
                            rank = 2 + n_dense + j
                            reason[i] = slot_reason[j]
                            bad_field[i] = c
                    t = u + 1
                continue
            if a == b:
                if r == ROLE_LABEL:
                    rank = 0
                    reason[i] = _BAD_LABEL
                    bad_field[i] = c
                continue  # empty dense = 0, empty time = absent
            code, v = _number(buf, a, b)
            if code == NUM_SLOW:
                slow = True
                break
            good = code == NUM_OK
            if r == ROLE_LABEL:
                if good and label_lo <= v <= label_hi:
                    labels[i] = v
                else:
                    rank = 0
                    reason[i] = _BAD_LABEL
                    bad_field[i] = c
            elif r == ROLE_DENSE:
                if good and abs(v) <= _F32_MAX:
                    dense[i, col[c]] = v
                elif 1 + col[c] < rank:
                    rank = 1 + col[c]
                    reason[i] = _BAD_DENSE
                    bad_field[i] = c
            elif good:
                etime[i] = v
            elif 1 + n_dense < rank:
                rank = 1 + n_dense
                reason[i] = _SCHEMA
                bad_field[i] = c
        if slow:
            status[i] = FALLBACK
            m = m_row
        elif rank < (1 << 30):
            status[i] = REJECT
            m = m_row
    return status, reason, bad_field, labels, dense, etime, empty, t_row[:m], t_slot[:m], t_id[:m]


def slot_detail(schema: SchemaConfig, name: str) -> str:
    kind = next(s.hash for s in schema.sparse_slots if s.name == name)
    return f"slot '{name}': value is not a valid {kind.value} id"


class CsvLinesParser:
    """Parses batches of CSV lines (one record per message) under a csv-format schema.

    ``header`` names the columns in order: a file's header row, else ``schema.columns``.
    """

    def __init__(self, schema: SchemaConfig, *, header: Sequence[str] | None = None,
                 max_message_bytes: int = 65536) -> None:
        if schema.format != "csv":
            raise ValueError("CsvLinesParser needs a csv-format schema")
        header = tuple(header if header is not None else schema.columns)
        if not header:
            raise InvalidInput("csv records need their column names: a header row, or schema.columns for messages")
        wanted = [schema.label_field, *schema.dense_names, *(s.name for s in schema.sparse_slots)]
        if schema.event_time is not None:
            wanted.append(schema.event_time)
        missing = [w for w in wanted if w not in header]
        if missing:
            raise InvalidInput(f"csv columns {list(header)[:50]} lack schema fields {missing}",
                               detail={"missing": missing})
        dup = sorted({h for h in header if header.count(h) > 1 and h in wanted})
        if dup:
            raise InvalidInput(f"csv header names schema fields more than once: {dup}")
        self.schema = schema
        self.header = header
        self.max_message_bytes = max_message_bytes
        self._slot_ids = schema.slot_ids()
        sparse = schema.sparse_slots
        dense_col = {name: j for j, name in enumerate(schema.dense_names)}
        sparse_col = {s.name: j for j, s in enumerate(sparse)}
        role = np.zeros(len(header), dtype=np.int8)
        col = np.zeros(len(header), dtype=np.int64)
        for c, name in enumerate(header):
            if name == schema.label_field:
                role[c] = ROLE_LABEL
            elif name in dense_col:
                role[c], col[c] = ROLE_DENSE, dense_col[name]
            elif name == schema.event_time:
                role[c] = ROLE_TIME
            elif name in sparse_col:
                role[c], col[c] = ROLE_SPARSE, sparse_col[name]
        self._role, self._col = role, col
        self._slot_kind = np.array([KIND_CODE[s.hash] for s in sparse], dtype=np.int64)
        self._slot_id = np.array([self._slot_ids[s.name] for s in sparse], dtype=np.int64)
        self._slot_reason = np.array([SLOT_REASON[s.hash] for s in sparse], dtype=np.int8)
        self._slot_sep = np.array([ord(s.separator) if s.separator else -1 for s in sparse], dtype=np.int64)
        self._sparse_names = [s.name for s in sparse]
        self._presence_col = np.array([header.index(name) for name in schema.presence_fields], dtype=np.int64)

    def parse(self, values: Sequence[bytes]) -> tuple[Batch, list[Rejected]]:
        """Parse a batch: the kernel for plain records, the reference path for the rest."""
        if self.schema.event_time is not None and self.schema.event_time_unit == ISO8601:
            return self.parse_reference(values)  # the kernel reads numbers only
        buf, bounds = join_messages(values)
        cap = len(values) * len(self._sparse_names)
        for sep in {int(c) for c in self._slot_sep if c >= 0}:
            cap += int(np.count_nonzero(buf == sep))
        status, reason, bad_field, labels, dense, etime, empty, t_row, t_slot, t_id = scan_csv(
            buf, bounds, self.max_message_bytes, ord(self.schema.delimiter), self._role, self._col,
            len(self.schema.dense_names), self._slot_kind, self._slot_id, self._slot_reason, self._slot_sep, cap,
            *self.schema.label_bounds,
        )
        rejected = [
            Rejected(int(i), RejectReason(int(reason[i])), self._detail(int(reason[i]), int(bad_field[i]), values[i]),
                     values[i])
            for i in np.flatnonzero(status == REJECT)
        ]
        flat, base, offsets = group_by_slot(status, t_row, t_slot, t_id, len(self._sparse_names))
        slots = {name: (flat[base[j] : base[j + 1]], offsets[j]) for j, name in enumerate(self._sparse_names)}
        rows = np.flatnonzero(status == OK)
        batch = self._batch(labels[rows], dense[rows], etime[rows], slots, empty[np.ix_(rows, self._presence_col)])
        return with_reference(batch, rejected, rows, np.flatnonzero(status == FALLBACK), values, self.parse_reference)

    def _batch(self, labels: np.ndarray, dense: np.ndarray, etime: np.ndarray,
               slots: dict[str, tuple[np.ndarray, np.ndarray]], absent: np.ndarray) -> Batch:
        s = self.schema
        return Batch(
            labels=s.derive_labels(labels),
            dense=dense.astype(np.float32),
            slots=slots,
            event_time=None if s.event_time is None else etime if s.event_time_unit == ISO8601  # seconds already
            else numbers_to_seconds(etime, s.event_time_unit),
            user_id=None if s.user_id is None else first_ids(slots[s.user_id]),
            item_id=None if s.item_id is None else first_ids(slots[s.item_id]),
            absent=absent,
        )

    def _detail(self, reason: int, field: int, raw: bytes) -> str:
        s = self.schema
        if reason == RejectReason.OVERSIZED:
            return f"message is larger than max_message_bytes ({len(raw)} > {self.max_message_bytes})"
        if reason == RejectReason.FIELD_COUNT:
            return f"expected {len(self.header)} fields separated by {s.delimiter!r}, got {field}"
        name = self.header[field]
        if reason == RejectReason.BAD_LABEL:
            return s.label_problem
        if reason == RejectReason.BAD_DENSE:
            return f"field '{name}': non-numeric dense value"
        if reason == RejectReason.SCHEMA:
            return f"field '{name}': event time must be a number"
        return slot_detail(s, name)

    def parse_reference(self, values: Sequence[bytes]) -> tuple[Batch, list[Rejected]]:
        """The reference semantics, record by record through :mod:`csv` (slow, exact)."""
        s = self.schema
        n = len(values)
        n_dense = len(s.dense_names)
        labels = np.zeros(n)
        dense = np.zeros((n, n_dense))
        etime = np.full(n, np.nan)
        absent = np.zeros((n, len(self._presence_col)), dtype=bool)
        tokens: dict[str, list[tuple[int, bytes]]] = {name: [] for name in self._sparse_names}
        reasons: dict[int, tuple[RejectReason, str]] = {}
        for i, raw in enumerate(values):
            fail = self._reference_row(i, raw, labels, dense, etime, absent, tokens)
            if fail is not None:
                reasons[i] = fail
        slots = {}
        for j, name in enumerate(self._sparse_names):
            slot = s.sparse_slots[j]
            rows = np.array([r for r, _ in tokens[name]], dtype=np.int64)
            ids, ok = hash_tokens([t for _, t in tokens[name]], slot_id=self._slot_ids[name], kind=slot.hash)
            for r in np.unique(rows[~ok]):  # a bad id: the first bad slot in schema order wins
                reasons.setdefault(int(r), (SLOT_REASON[slot.hash], slot_detail(s, name)))
            offsets = np.zeros(n + 1, dtype=np.int64)
            np.cumsum(np.bincount(rows, minlength=n), out=offsets[1:])
            slots[name] = (ids, offsets)
        rejected = [Rejected(i, reason, detail, values[i]) for i, (reason, detail) in sorted(reasons.items())]
        keep = np.ones(n, dtype=bool)
        keep[list(reasons)] = False
        batch = self._batch(labels, dense, etime, slots, absent)
        return (batch if keep.all() else batch.take(np.flatnonzero(keep))), rejected

    def _reference_row(self, i: int, raw: bytes, labels: np.ndarray, dense: np.ndarray, etime: np.ndarray,
                       absent: np.ndarray,
                       tokens: dict[str, list[tuple[int, bytes]]]) -> tuple[RejectReason, str] | None:
        s = self.schema
        if len(raw) > self.max_message_bytes:
            return RejectReason.OVERSIZED, self._detail(RejectReason.OVERSIZED, -1, raw)
        text = raw.rstrip(b"\r\n").decode("utf-8", "surrogateescape")
        try:
            rows = list(csv.reader([text], delimiter=s.delimiter, strict=True))
        except csv.Error as exc:
            return RejectReason.SCHEMA, f"malformed CSV: {exc}"
        fields = (rows[0] if rows else []) or [""]  # an empty line is one empty field, as the kernel counts it
        if len(fields) > len(self.header):
            return RejectReason.FIELD_COUNT, self._detail(RejectReason.FIELD_COUNT, len(fields), raw)
        fields += [""] * (len(self.header) - len(fields))  # a short row: its missing cells are empty
        absent[i] = [fields[c] == "" for c in self._presence_col]
        fail: tuple[int, RejectReason, str] | None = None  # (rank, reason, detail): first in schema order

        def flag(rank: int, reason: RejectReason, detail: str) -> None:
            nonlocal fail
            if fail is None or rank < fail[0]:
                fail = (rank, reason, detail)

        n_dense = len(s.dense_names)
        pending: list[tuple[str, bytes]] = []
        for c, text_value in enumerate(fields):
            r, name = self._role[c], self.header[c]
            if r == ROLE_IGNORE:
                continue
            if r == ROLE_SPARSE:
                sep = s.sparse_slots[self._col[c]].separator
                pieces = text_value.split(sep) if sep else [text_value]
                pending += [(name, p.encode("utf-8", "surrogateescape")) for p in pieces if p]
                continue
            v = _reference_number(text_value)
            if r == ROLE_LABEL:
                lo, hi = s.label_bounds
                if v is None or not lo <= v <= hi:
                    flag(0, RejectReason.BAD_LABEL, s.label_problem)
                else:
                    labels[i] = v
            elif r == ROLE_DENSE:
                if text_value == "":
                    continue
                if v is None or abs(v) > _F32_MAX:
                    flag(1 + int(self._col[c]), RejectReason.BAD_DENSE, f"field '{name}': non-numeric dense value")
                else:
                    dense[i, self._col[c]] = v
            elif text_value != "" and s.event_time_unit == ISO8601:
                seconds, bad = iso_seconds([text_value])
                if bad[0]:
                    flag(1 + n_dense, RejectReason.SCHEMA, f"field '{name}': event time must be ISO-8601 date text")
                else:
                    etime[i] = seconds[0]
            elif text_value != "":
                if v is None:
                    flag(1 + n_dense, RejectReason.SCHEMA, f"field '{name}': event time must be a number")
                else:
                    etime[i] = v
        # Sparse ids are checked after the fixed fields: they rank last (the caller hashes them).
        if fail is not None:
            return fail[1], fail[2]
        for name, tok in pending:
            tokens[name].append((i, tok))
        return None


def _reference_number(text: str) -> float | None:
    return float(text) if _NUMBER.fullmatch(text) else None


def read_header(line: bytes, delimiter: str) -> tuple[str, ...]:
    """Column names of a CSV header row (quotes allowed; a UTF-8 byte-order mark is dropped)."""
    text = line.rstrip(b"\r\n").decode("utf-8-sig", "replace")
    try:
        rows = list(csv.reader([text], delimiter=delimiter, strict=True))
    except csv.Error as exc:
        raise InvalidInput(f"malformed CSV header: {exc}") from None
    return tuple(f.strip() for f in rows[0]) if rows else ()
