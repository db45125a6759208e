"""The numba fast path of the JSON-lines parser: one kernel scans a whole batch of objects.

It handles the common shape (an object of numbers, plain strings, null and flat arrays) and
writes columns directly: no Python object per field. Anything unusual (escaped strings, a
syntax error, exponents beyond exact float range, duplicate keys, NaN literals) marks the
record for the reference ``json.loads`` path, which decides. Both paths give equal results.
"""

from __future__ import annotations

import numpy as np

from core.kernel_cache import kernel
from logrecords.hashing import token_id
from logrecords.rejects import RejectReason

ROLE_LABEL, ROLE_DENSE, ROLE_TIME, ROLE_SPARSE = 0, 1, 2, 3
OK, REJECT, FALLBACK = 0, 1, 2

_SCHEMA = np.int8(RejectReason.SCHEMA)
_BAD_LABEL = np.int8(RejectReason.BAD_LABEL)
_BAD_DENSE = np.int8(RejectReason.BAD_DENSE)
_F32_MAX = float(np.finfo(np.float32).max)
_POW10 = np.array([10.0**k for k in range(23)])


@kernel(inline="always")
def _ws(buf: np.ndarray, p: int, e: int) -> int:
    while p < e and (buf[p] == 32 or buf[p] == 9 or buf[p] == 10 or buf[p] == 13):
        p += 1
    return p


@kernel()
def _string_end(buf: np.ndarray, p: int, e: int) -> int:
    """p is just after the opening quote; index of the closing quote, -1 on escape/control/EOF.

    Multi-byte characters must be strict UTF-8 (as ``json.loads`` of bytes requires): the id
    hashes these bytes, which then equal the UTF-8 encoding of the decoded text.
    """
    while p < e:
        c = buf[p]
        if c == 34:
            return p
        if c == 92 or c < 32:
            return -1
        if c < 0x80:
            p += 1
            continue
        # Lead byte -> number of continuation bytes and the allowed range of the first one.
        lo, hi = 0x80, 0xBF
        if 0xC2 <= c <= 0xDF:
            more = 1
        elif 0xE0 <= c <= 0xEF:
            more = 2
            if c == 0xE0:
                lo = 0xA0
            elif c == 0xED:
                hi = 0x9F  # no UTF-16 surrogates
        elif 0xF0 <= c <= 0xF4:
            more = 3
            if c == 0xF0:
                lo = 0x90
            elif c == 0xF4:
                hi = 0x8F
        else:
            return -1
        if p + more >= e or not (lo <= buf[p + 1] <= hi):
            return -1
        for k in range(2, more + 1):
            if not (0x80 <= buf[p + k] <= 0xBF):
                return -1
        p += more + 1
    return -1


@kernel()
def _number(buf: np.ndarray, p: int, e: int) -> tuple[int, float, bool]:
    """(end, value, is_integer_literal); end = -1 when the number needs the reference parser."""
    s = p
    neg = p < e and buf[p] == 45
    if neg:
        p += 1
    if p >= e or not (48 <= buf[p] <= 57):
        return -1, 0.0, False
    if buf[p] == 48 and p + 1 < e and 48 <= buf[p + 1] <= 57:
        return -1, 0.0, False  # leading zero: invalid JSON
    mant = 0
    digits = 0
    while p < e and 48 <= buf[p] <= 57:
        mant = mant * 10 + (buf[p] - 48)
        digits += 1
        p += 1
    exp10 = 0
    integer = True
    if p < e and buf[p] == 46:
        integer = False
        p += 1
        if p >= e or not (48 <= buf[p] <= 57):
            return -1, 0.0, False
        while p < e and 48 <= buf[p] <= 57:
            mant = mant * 10 + (buf[p] - 48)
            digits += 1
            exp10 -= 1
            p += 1
    if p < e and (buf[p] == 101 or buf[p] == 69):
        return -1, 0.0, False  # exponents: rare, left to the reference parser
    if digits > 15 or exp10 < -22:
        return -1, 0.0, False  # beyond the exactly-rounded fast path
    if integer and neg and mant == 0:
        return -1, 0.0, False  # "-0": Python's int text differs
    v = float(mant) / _POW10[-exp10] if exp10 < 0 else float(mant)
    return p, (-v if neg else v), integer and p - s > 0


@kernel()
def _literal(buf: np.ndarray, p: int, e: int, word: np.ndarray) -> int:
    if p + word.shape[0] > e:
        return -1
    for k in range(word.shape[0]):
        if buf[p + k] != word[k]:
            return -1
    return p + word.shape[0]


_TRUE = np.frombuffer(b"true", dtype=np.uint8)
_FALSE = np.frombuffer(b"false", dtype=np.uint8)
_NULL = np.frombuffer(b"null", dtype=np.uint8)


@kernel()
def _scalar_end(buf: np.ndarray, p: int, e: int) -> int:
    """End of a string/number/true/false/null at p; -1 for containers or anything needing the reference parser."""
    c = buf[p]
    if c == 34:
        q = _string_end(buf, p + 1, e)
        return -1 if q < 0 else q + 1
    if c == 45 or 48 <= c <= 57:
        return _number(buf, p, e)[0]
    if c == 116:
        return _literal(buf, p, e, _TRUE)
    if c == 102:
        return _literal(buf, p, e, _FALSE)
    if c == 110:
        return _literal(buf, p, e, _NULL)
    return -1


@kernel(nogil=True)  # the consumer parses one piece while kafka-python decodes the next
def scan_json(  # one pass over the bytes; splitting it up would cost a call per token
    buf: np.ndarray, bounds: np.ndarray, max_bytes: int,
    key_buf: np.ndarray, key_bounds: np.ndarray, role: np.ndarray, col: np.ndarray,
    slot_kind: np.ndarray, slot_id: np.ndarray, slot_reason: np.ndarray, n_dense: int, cap: int,
    rotate: bool = False, label_lo: float = 0.0, label_hi: float = 1.0,
) -> tuple:
    # ``rotate`` (keys all distinct): look a key up from the field after the last one found, so records
    # whose keys come in schema order match at the first compare instead of scanning the whole table.
    # ``cap`` bounds the ids of the batch (a record holds at most its commas + 1 scalars), so the id
    # arrays never grow: rebinding arrays inside the loop costs numba reference counting per id.
    n = bounds.shape[0] - 1
    n_fields = role.shape[0]
    status = np.zeros(n, dtype=np.int8)
    reason = np.zeros(n, dtype=np.int8)
    bad_field = np.full(n, -1, dtype=np.int32)
    labels = np.full(n, np.nan)
    dense = np.zeros((n, n_dense))
    etime = np.full(n, np.nan)
    given = np.zeros((n, n_fields), dtype=np.bool_)  # the record holds the field's key with a value other than null
    t_row = np.empty(cap, dtype=np.int64)
    t_slot = np.empty(cap, dtype=np.int32)
    t_id = np.empty(cap, dtype=np.uint64)
    m = 0
    seen = np.zeros(n_fields, dtype=np.bool_)
    for i in range(n):
        s, e = bounds[i], bounds[i + 1]
        if e - s > max_bytes:
            status[i] = FALLBACK
            continue
        seen[:] = False
        m_row = m
        hint = 0
        rank = 1 << 30  # rank of the first failing field in schema order (matches the reference path)
        p = _ws(buf, s, e)
        ok = p < e and buf[p] == 123
        p += 1
        p = _ws(buf, p, e)
        if ok and p < e and buf[p] == 125:
            p += 1
        else:
            while ok:
                p = _ws(buf, p, e)
                if p >= e or buf[p] != 34:
                    ok = False
                    break
                q = _string_end(buf, p + 1, e)
                if q < 0:
                    ok = False
                    break
                f = -1
                for kk in range(n_fields):
                    k = kk + hint
                    if k >= n_fields:
                        k -= n_fields
                    a, b = key_bounds[k], key_bounds[k + 1]
                    if b - a == q - p - 1:
                        same = True
                        for t in range(b - a):
                            if key_buf[a + t] != buf[p + 1 + t]:
                                same = False
                                break
                        if same:
                            f = k
                            break
                if rotate and f >= 0:
                    hint = f + 1
                p = _ws(buf, q + 1, e)
                if p >= e or buf[p] != 58:
                    ok = False
                    break
                p = _ws(buf, p + 1, e)
                if p >= e:
                    ok = False
                    break
                if f >= 0 and seen[f]:
                    ok = False  # duplicate key: the reference parser keeps the last one
                    break
                c = buf[p]
                if f < 0:
                    p = _scalar_end(buf, p, e)  # nested values under unknown keys: reference parser
                    if p < 0:
                        ok = False
                        break
                elif role[f] != ROLE_SPARSE:
                    seen[f] = True
                    given[i, f] = c != 110
                    r = role[f]
                    good = True
                    v = np.nan
                    if c == 45 or 48 <= c <= 57:
                        p, v, _ = _number(buf, p, e)
                    else:
                        good = c == 110  # null: absent; strings and booleans are not numbers
                        p = _scalar_end(buf, p, e)
                    if p < 0:
                        ok = False
                        break
                    if r == ROLE_LABEL:
                        if good and v == v and label_lo <= v <= label_hi:
                            labels[i] = v
                    elif r == ROLE_DENSE:
                        if good and abs(v) > _F32_MAX:
                            good = False  # would be inf after the float32 cast
                        if good:
                            dense[i, col[f]] = 0.0 if v != v else v
                        elif 1 + col[f] < rank:
                            rank = 1 + col[f]
                            reason[i] = _BAD_DENSE
                            bad_field[i] = f
                    elif good:
                        etime[i] = v
                    elif 1 + n_dense < rank:
                        rank = 1 + n_dense
                        reason[i] = _SCHEMA
                        bad_field[i] = f
                else:
                    seen[f] = True
                    given[i, f] = c != 110
                    j = col[f]
                    is_list = c == 91
                    if is_list:
                        p = _ws(buf, p + 1, e)
                        if p < e and buf[p] == 93:
                            p += 1
                            c = 0
                        else:
                            c = buf[p] if p < e else 0
                    while c != 0:
                        valid = False
                        h = np.uint64(0)
                        if c == 34:
                            q = _string_end(buf, p + 1, e)
                            if q < 0:
                                ok = False
                                break
                            valid, h = token_id(buf, p + 1, q, slot_kind[j], slot_id[j])
                            p = q + 1
                        elif c == 45 or 48 <= c <= 57:
                            start = p
                            p, _, integer = _number(buf, p, e)
                            if p < 0:
                                ok = False
                                break
                            valid = integer
                            if integer:
                                valid, h = token_id(buf, start, p, slot_kind[j], slot_id[j])
                        else:
                            p = _scalar_end(buf, p, e)  # true/false/null: not ids; containers: -1
                            if p < 0:
                                ok = False
                                break
                            if c == 110 and not is_list:
                                break  # a null slot holds no ids
                        if valid:
                            t_row[m] = i
                            t_slot[m] = j
                            t_id[m] = h
                            m += 1
                        elif 2 + n_dense + j < rank:
                            rank = 2 + n_dense + j
                            reason[i] = slot_reason[j]
                            bad_field[i] = f
                        if not is_list:
                            break
                        p = _ws(buf, p, e)
                        if p < e and buf[p] == 44:
                            p = _ws(buf, p + 1, e)
                            c = buf[p] if p < e else 0
                            if c == 93:
                                ok = False  # trailing comma
                                break
                        elif p < e and buf[p] == 93:
                            p += 1
                            break
                        else:
                            ok = False
                            break
                    if not ok:
                        break
                p = _ws(buf, p, e)
                if p < e and buf[p] == 44:
                    p += 1
                    continue
                if p < e and buf[p] == 125:
                    p += 1
                    break
                ok = False
        if ok and _ws(buf, p, e) != e:
            ok = False
        if not ok:
            status[i] = FALLBACK
            m = m_row
            continue
        if labels[i] != labels[i]:
            rank = 0
            reason[i] = _BAD_LABEL
            bad_field[i] = -1
        if rank < (1 << 30):
            status[i] = REJECT
            m = m_row
    return status, reason, bad_field, labels, dense, etime, given, t_row[:m], t_slot[:m], t_id[:m]
