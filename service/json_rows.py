"""float32 matrices straight to JSON text (numba), for lookup responses of many rows.

``json.dumps(rows.tolist())`` spends ~0.5 µs per float printing the float64 form of each
float32 (17 digits). Nine significant digits always identify a float32, so each value is
written as ``d.dddddddde±x`` with trailing zeros trimmed: parsed back and cast to float32 it is
bit-identical to the served value, at a fraction of the cost.
"""

from __future__ import annotations

import math

import numpy as np

from core.kernel_cache import kernel

_SIG = 9  # significant digits that identify any float32


@kernel(nogil=True)
def _write_float(v: np.float32, out: np.ndarray, pos: int) -> int:
    x = np.float64(v)
    if not np.isfinite(x):
        for c in b"null":
            out[pos] = c
            pos += 1
        return pos
    if x == 0.0:
        if math.copysign(1.0, x) < 0.0:
            out[pos] = 45  # "-0.0": the sign of zero is part of the value
            pos += 1
        out[pos], out[pos + 1], out[pos + 2] = 48, 46, 48  # "0.0"
        return pos + 3
    if x < 0.0:
        out[pos] = 45  # "-"
        pos += 1
        x = -x
    e = int(np.floor(np.log10(x)))
    n = np.int64(np.round(x * 10.0 ** (_SIG - 1 - e)))
    if n >= 10**_SIG:  # log10 rounded up across a power of ten
        e += 1
        n = np.int64(np.round(x * 10.0 ** (_SIG - 1 - e)))
    elif n < 10 ** (_SIG - 1):
        e -= 1
        n = np.int64(np.round(x * 10.0 ** (_SIG - 1 - e)))
    digits = np.empty(_SIG, np.uint8)
    for i in range(_SIG - 1, -1, -1):
        digits[i] = 48 + n % 10
        n //= 10
    last = _SIG - 1
    while last > 0 and digits[last] == 48:
        last -= 1
    out[pos] = digits[0]
    out[pos + 1] = 46  # "."
    pos += 2
    if last == 0:
        out[pos] = 48
        pos += 1
    for i in range(1, last + 1):
        out[pos] = digits[i]
        pos += 1
    if e != 0:
        out[pos] = 101  # "e"
        pos += 1
        if e < 0:
            out[pos] = 45
            pos += 1
            e = -e
        if e >= 10:
            out[pos] = 48 + e // 10
            pos += 1
        out[pos] = 48 + e % 10
        pos += 1
    return pos


@kernel(nogil=True)
def _encode(rows: np.ndarray, out: np.ndarray) -> int:
    pos = 0
    out[pos] = 91  # "["
    pos += 1
    for i in range(rows.shape[0]):
        if i:
            out[pos] = 44  # ","
            pos += 1
        out[pos] = 91
        pos += 1
        for j in range(rows.shape[1]):
            if j:
                out[pos] = 44
                pos += 1
            pos = _write_float(rows[i, j], out, pos)
        out[pos] = 93  # "]"
        pos += 1
    out[pos] = 93
    return pos + 1


def rows_json(rows: np.ndarray) -> bytes:
    """JSON array of arrays of the float32 ``rows`` (n, w)."""
    rows = np.ascontiguousarray(rows, np.float32)
    if rows.ndim != 2:
        raise ValueError(f"rows_json needs a 2-d array, got shape {rows.shape}")
    out = np.empty(2 + rows.shape[0] * (2 + rows.shape[1] * 17), np.uint8)  # 17 >= len("-d.dddddddde-xx,")
    return out[: _encode(rows, out)].tobytes()
