"""Event times as the schema spells them (``schema.event_time_unit``), read into seconds since the epoch.

Numbers in ``s``, ``ms``, ``us`` or ``ns`` are divided by their unit; ``iso8601`` text
(``2024-05-01``, ``2024-05-01T12:30:00``, a space for the ``T``, fractions of a second, ``Z`` or a
``+02:00``/``-0530`` offset; no zone is UTC) is parsed by one numba kernel over the batch's bytes.
A value that is no such time is NaN with its ``bad`` flag set, which the parsers refuse naming the field.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from core.kernel_cache import JIT, kernel
from logrecords.criteo import join_messages

EPOCH_UNITS = {"s": 1.0, "ms": 1e3, "us": 1e6, "ns": 1e9}
ISO8601 = "iso8601"


def numbers_to_seconds(values: np.ndarray, unit: str) -> np.ndarray:
    """float64 seconds of epoch numbers in ``unit`` (NaN stays NaN)."""
    scale = EPOCH_UNITS[unit]
    return values if scale == 1.0 else values / scale


def iso_seconds(texts: Sequence[bytes | str | None]) -> tuple[np.ndarray, np.ndarray]:
    """float64 seconds of ISO-8601 texts (None -> NaN, not bad) and a mask of the values that are not one."""
    given = np.fromiter((t is not None for t in texts), dtype=bool, count=len(texts))
    raw = [t.encode("utf-8", "replace") if isinstance(t, str) else (t or b"") for t in texts]
    buf, bounds = join_messages(raw)
    seconds, ok = _scan_iso(buf, bounds)
    bad = given & ~ok
    seconds[~ok] = np.nan
    return seconds, bad


@kernel(inline="always", **JIT)
def _digits(buf: np.ndarray, at: int, n: int, end: int) -> int:
    """The ``n`` decimal digits at ``at`` as a number, or -1."""
    if at + n > end:
        return -1
    v = 0
    for k in range(at, at + n):
        d = np.int64(buf[k]) - 48
        if d < 0 or d > 9:
            return -1
        v = v * 10 + d
    return v


@kernel(inline="always", **JIT)
def _days_from_civil(y: int, m: int, d: int) -> int:
    """Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm)."""
    y -= m <= 2
    era = (y if y >= 0 else y - 399) // 400
    yoe = y - era * 400
    doy = (153 * (m + (-3 if m > 2 else 9)) + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


@kernel(**JIT)
def _scan_iso(buf: np.ndarray, bounds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n = bounds.shape[0] - 1
    out = np.zeros(n, np.float64)
    ok = np.zeros(n, np.bool_)
    days_in = np.array([31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31], np.int64)
    for i in range(n):
        at, end = bounds[i], bounds[i + 1]
        y, mo, d = _digits(buf, at, 4, end), _digits(buf, at + 5, 2, end), _digits(buf, at + 8, 2, end)
        if y < 0 or mo < 1 or mo > 12 or d < 1 or d > days_in[mo - 1] or buf[at + 4] != 45 or buf[at + 7] != 45:
            continue
        if mo == 2 and d == 29 and not (y % 4 == 0 and (y % 100 != 0 or y % 400 == 0)):
            continue
        secs = np.float64(_days_from_civil(y, mo, d)) * np.float64(86400.0)
        p = at + 10
        good = True
        if p < end and (buf[p] == 84 or buf[p] == 32):  # 'T' or ' '
            hh, mm = _digits(buf, p + 1, 2, end), _digits(buf, p + 4, 2, end)
            if hh < 0 or hh > 23 or mm < 0 or mm > 59 or buf[p + 3] != 58:
                continue
            secs += np.float64(hh * 3600 + mm * 60)
            p += 6
            if p < end and buf[p] == 58:  # ':' seconds
                ss = _digits(buf, p + 1, 2, end)
                if ss < 0 or ss > 60:
                    continue
                secs += np.float64(ss)
                p += 3
                if p < end and (buf[p] == 46 or buf[p] == 44):  # '.' or ',' fraction
                    p += 1
                    scale = np.float64(0.1)
                    start = p
                    while p < end and 48 <= buf[p] <= 57:
                        secs += np.float64(buf[p] - 48) * scale
                        scale *= np.float64(0.1)
                        p += 1
                    good = p > start
            if good and p < end and buf[p] == 90:  # 'Z'
                p += 1
            elif good and p < end and (buf[p] == 43 or buf[p] == 45):  # '+' or '-' offset
                sign = 1 if buf[p] == 43 else -1
                oh = _digits(buf, p + 1, 2, end)
                p += 3
                if p < end and buf[p] == 58:
                    p += 1
                om = _digits(buf, p, 2, end) if p < end else 0
                p += 2 if p < end else 0
                if oh < 0 or oh > 23 or om < 0 or om > 59:
                    continue
                secs -= np.float64(sign * (oh * 3600 + om * 60))
        if good and p == end:
            out[i] = secs
            ok[i] = True
    return out, ok
