"""Criteo TSV parser: label, 13 integer dense fields, 26 hex categoricals, tab separated.

Empty dense fields read as 0, empty categoricals as "no id in this slot". The whole batch is
parsed by one numba kernel over a single bytes buffer (no per-field Python work); only
rejected records are visited in Python, to describe them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from core.kernel_cache import kernel
from logrecords.batch import Batch
from logrecords.hashing import KIND_CODE, SLOT_SHIFT, token_id
from logrecords.rejects import Rejected, RejectReason
from logrecords.schema_config import SchemaConfig

_OVERSIZED = np.int8(RejectReason.OVERSIZED)
_FIELD_COUNT = np.int8(RejectReason.FIELD_COUNT)
_BAD_LABEL = np.int8(RejectReason.BAD_LABEL)
_BAD_DENSE = np.int8(RejectReason.BAD_DENSE)
_SPARSE_REASON = np.array([RejectReason.BAD_TEXT, RejectReason.BAD_HEX, RejectReason.BAD_INT], dtype=np.int8)


_HEX_DIGIT = np.full(256, -1, np.int8)  # byte -> its hex digit value, -1 when not one
_HEX_DIGIT[48:58] = np.arange(10)
_HEX_DIGIT[97:103] = np.arange(10, 16)
_HEX_DIGIT[65:71] = np.arange(10, 16)
_U4 = np.uint64(4)
_SHIFT = np.uint64(SLOT_SHIFT)


@kernel(inline="always")
def _hex_id(buf: np.ndarray, start: int, end: int, slot_id: int, digits: np.ndarray) -> tuple[bool, np.uint64]:
    """:func:`logrecords.hashing.token_id` of a ``hex`` field, by table lookup: one load a byte
    instead of three range tests."""
    if end - start > 14:
        return False, np.uint64(0)
    v = np.uint64(0)
    for k in range(start, end):
        d = digits[buf[k]]
        if d < 0:
            return False, np.uint64(0)
        v = (v << _U4) | np.uint64(d)
    return True, (np.uint64(slot_id) << np.uint64(SLOT_SHIFT)) | v


@kernel(inline="always")
def _hex8(buf: np.ndarray, start: int, digits: np.ndarray) -> tuple[bool, np.uint64]:
    """The 8 hex digits at ``start`` as a number, without branches per digit (False: a byte is not one)."""
    v = np.int64(0)
    bad = np.int64(0)
    for k in range(8):
        d = np.int64(digits[buf[start + k]])
        bad |= d
        v = (v << 4) | (d & 15)
    return bad >= 0, np.uint64(v)


@kernel(inline="always")
def _parse_number(buf: np.ndarray, s: int, e: int) -> tuple[bool, float]:
    # [-]digits[.digits]; empty is a missing value (0).
    if s == e:
        return True, 0.0
    neg = buf[s] == 45
    if neg:
        s += 1
        if s == e:
            return False, 0.0
    v = 0.0
    k = s
    while k < e and 48 <= buf[k] <= 57:
        v = v * 10.0 + (buf[k] - 48)
        k += 1
    if k < e and buf[k] == 46:
        k += 1
        scale = 0.1
        while k < e and 48 <= buf[k] <= 57:
            v += (buf[k] - 48) * scale
            scale *= 0.1
            k += 1
    if k != e or (k == s):
        return False, 0.0
    return True, -v if neg else v


@kernel(nogil=True, error_model="numpy")  # the training prefetch thread parses while the step's Python runs
def _parse_lines(
    buf: np.ndarray,
    bounds: np.ndarray,
    max_bytes: int,
    n_dense: int,
    slot_ids: np.ndarray,
    kinds: np.ndarray,
    sparse_reason: np.ndarray,
    newline_ended: bool,
    digits: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One pass over each record's bytes: fields are parsed as their tabs are met. A record
    with the wrong number of fields is FIELD_COUNT whatever else is wrong in it (the rest of
    its tabs are counted after its first bad field). ``newline_ended``: each record ends with
    its line's "\n" (file lines), which ``max_bytes`` does not count."""
    n = bounds.shape[0] - 1
    n_sparse = slot_ids.shape[0]
    n_fields = 1 + n_dense + n_sparse
    labels = np.zeros(n, dtype=np.float32)
    dense = np.zeros((n, n_dense), dtype=np.float32)
    ids = np.zeros((n_sparse, n), dtype=np.uint64)
    present = np.zeros((n_sparse, n), dtype=np.bool_)
    status = np.zeros(n, dtype=np.int8)
    bad_field = np.full(n, -1, dtype=np.int32)
    for i in range(n):
        s = bounds[i]
        e = bounds[i + 1]
        size = e - s
        if newline_ended and size > 0 and buf[e - 1] == 10:
            size -= 1
        if size > max_bytes:
            status[i] = _OVERSIZED
            continue
        while e > s and (buf[e - 1] == 10 or buf[e - 1] == 13):
            e -= 1
        f = 0
        start = s
        code = np.int8(0)
        over = False
        k = s
        while k <= e:
            # fast paths, tried before the general one: an 8-digit hex id (Criteo's categoricals) and
            # a plain non-negative integer (its dense fields), parsed in the pass that finds their
            # end; anything else (or a bad byte) goes the general way from the field's start
            if f > n_dense and f < n_fields and kinds[f - 1 - n_dense] == 1 and start + 8 <= e and (
                    start + 8 == e or buf[start + 8] == 9):
                ok, h = _hex8(buf, start, digits)
                if ok:
                    j = f - 1 - n_dense
                    ids[j, i] = (np.uint64(slot_ids[j]) << _SHIFT) | h
                    present[j, i] = True
                    f += 1
                    k = start + 9
                    start = k
                    continue
            elif 0 < f <= n_dense:
                v = 0.0
                while k < e and 48 <= buf[k] <= 57:
                    v = v * 10.0 + (buf[k] - 48)
                    k += 1
                if k == e or buf[k] == 9:
                    dense[i, f - 1] = v  # empty: 0, as _parse_number reads it
                    f += 1
                    start = k + 1
                    k += 1
                    continue
                k = start
            while k < e and buf[k] != 9:
                k += 1
            if f >= n_fields:  # one field too many: FIELD_COUNT below
                over = True
                break
            if f == 0:
                if k - start == 1 and (buf[start] == 48 or buf[start] == 49):
                    labels[i] = buf[start] - 48
                else:
                    code = _BAD_LABEL
            elif f <= n_dense:
                ok, v = _parse_number(buf, start, k)
                if ok:
                    dense[i, f - 1] = v
                else:
                    code = _BAD_DENSE
            elif k > start:
                j = f - 1 - n_dense
                if kinds[j] == 1:
                    ok, h = _hex_id(buf, start, k, slot_ids[j], digits)
                else:
                    ok, h = token_id(buf, start, k, kinds[j], slot_ids[j])
                if ok:
                    ids[j, i] = h
                    present[j, i] = True
                else:
                    code = sparse_reason[kinds[j]]
            f += 1
            start = k + 1
            k += 1
            if code != 0:
                break
        if code != 0 or over or f != n_fields:
            # the field count first: count the tabs this pass did not reach
            tabs = f if k <= e else f - 1  # k <= e: the last field read ended at a tab
            for t in range(k, e):
                if buf[t] == 9:
                    tabs += 1
            if tabs != n_fields - 1:
                status[i] = _FIELD_COUNT
                bad_field[i] = tabs + 1
            else:
                status[i] = code
                bad_field[i] = f - 1
    return labels, dense, ids, present, status, bad_field


@kernel(nogil=True, error_model="numpy")
def _ragged_slots(ids: np.ndarray, present: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every slot's present ids of the ``rows`` records, slot after slot in one array, and each
    slot's offsets (n_slots, len(rows) + 1, each from 0): all slots in one pass."""
    n_slots = ids.shape[0]
    m = rows.shape[0]
    offs = np.empty((n_slots, m + 1), np.int64)
    values = np.empty(n_slots * m, np.uint64)
    nnz = 0
    for j in range(n_slots):
        offs[j, 0] = 0
        c = 0
        for t in range(m):
            r = rows[t]
            if present[j, r]:
                values[nnz] = ids[j, r]
                nnz += 1
                c += 1
            offs[j, t + 1] = c
    return values[:nnz], offs


def join_messages(values: Sequence[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """One uint8 buffer holding every message, and int64 bounds (message i is buf[b[i]:b[i+1]])."""
    bounds = np.zeros(len(values) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, values), dtype=np.int64, count=len(values)), out=bounds[1:])
    return np.frombuffer(b"".join(values), dtype=np.uint8), bounds


_DESCRIBE = {
    RejectReason.OVERSIZED: "message is larger than max_message_bytes",
    RejectReason.BAD_LABEL: "label must be 0 or 1",
    RejectReason.BAD_DENSE: "non-numeric dense value",
    RejectReason.BAD_HEX: "bad hex categorical",
    RejectReason.BAD_INT: "bad integer categorical",
    RejectReason.BAD_TEXT: "bad categorical",
}


class CriteoParser:
    """Parses batches of Criteo TSV lines under a criteo-format schema."""

    def __init__(self, schema: SchemaConfig | None = None, *, max_message_bytes: int = 65536) -> None:
        self.schema = schema or SchemaConfig.criteo()
        if self.schema.format != "criteo":
            raise ValueError("CriteoParser needs a criteo-format schema")
        self.max_message_bytes = max_message_bytes
        sparse = self.schema.sparse_slots
        ids = self.schema.slot_ids()
        self._names = [self.schema.label_field, *self.schema.dense_names, *(s.name for s in sparse)]
        self._sparse_names = [s.name for s in sparse]
        self._slot_ids = np.array([ids[s.name] for s in sparse], dtype=np.int64)
        self._kinds = np.array([KIND_CODE[s.hash] for s in sparse], dtype=np.int64)
        self._n_dense = len(self.schema.dense_names)

    def parse(self, values: Sequence[bytes]) -> tuple[Batch, list[Rejected]]:
        buf, bounds = join_messages(values)
        return self._parse(buf, bounds, lambda i: values[i], newline_ended=False)

    def parse_lines(self, lines: tuple[np.ndarray, np.ndarray]) -> tuple[Batch, list[Rejected]]:
        """Records that are lines of one buffer, each with its "\n" (the last may lack it):
        ``(buf, bounds)``, record i is ``buf[bounds[i]:bounds[i + 1]]``. No bytes object per line."""
        buf, bounds = lines

        def raw(i: int) -> bytes:
            line = buf[bounds[i] : bounds[i + 1]].tobytes()
            return line[:-1] if line.endswith(b"\n") else line

        return self._parse(buf, bounds, raw, newline_ended=True)

    def _parse(self, buf: np.ndarray, bounds: np.ndarray, raw: Callable[[int], bytes], *,
               newline_ended: bool) -> tuple[Batch, list[Rejected]]:
        labels, dense, ids, present, status, bad_field = _parse_lines(
            buf, bounds, self.max_message_bytes, self._n_dense, self._slot_ids, self._kinds, _SPARSE_REASON,
            newline_ended, _HEX_DIGIT,
        )
        bad = np.flatnonzero(status)
        rejected = [self._describe(int(i), raw(int(i)), int(status[i]), int(bad_field[i])) for i in bad]
        rows = np.flatnonzero(status == 0) if bad.size else None
        return self._assemble(labels, dense, ids, present, rows), rejected

    def _assemble(
        self, labels: np.ndarray, dense: np.ndarray, ids: np.ndarray, present: np.ndarray, rows: np.ndarray | None
    ) -> Batch:
        values, offs = _ragged_slots(ids, present, np.arange(labels.shape[0]) if rows is None else rows)
        if rows is not None:
            labels, dense, ids = labels[rows], dense[rows], ids[:, rows]
        slots = {}
        start = 0
        for j, name in enumerate(self._sparse_names):  # views of one array: no per-slot work
            stop = start + int(offs[j, -1])
            slots[name] = (values[start:stop], offs[j])
            start = stop
        col = {name: j for j, name in enumerate(self._sparse_names)}
        user = self.schema.user_id
        item = self.schema.item_id
        return Batch(
            labels=labels,
            dense=dense,
            slots=slots,
            user_id=None if user is None else ids[col[user]].copy(),
            item_id=None if item is None else ids[col[item]].copy(),
        )

    def _describe(self, index: int, raw: bytes, code: int, field: int) -> Rejected:
        reason = RejectReason(code)
        if reason is RejectReason.FIELD_COUNT:
            detail = f"expected {len(self._names)} tab-separated fields, got {field}"
        elif reason is RejectReason.OVERSIZED:
            detail = f"{_DESCRIBE[reason]} ({len(raw)} > {self.max_message_bytes})"
        else:
            text = raw.rstrip(b"\r\n").split(b"\t")[field][:40]
            detail = f"field {field} ({self._names[field]}): {_DESCRIBE[reason]} {text!r}"
        return Rejected(index=index, reason=reason, detail=detail, raw=raw)
