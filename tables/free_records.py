"""Which records of a disk tier's file are free: a bit a record, and the write head's scan.

A record is free (its bit set) once its row is gone and no save reads the file; a live
record and one freed while a save reads it (held until the save ends) are both not free,
which is all the write head needs: it hands out free records and writes the others it
passes back unchanged. A bit a record keeps this an eighth of a byte a record of RAM, so
it stays small beside the disk index's slots when the file grows in large steps.
"""

from __future__ import annotations

import numpy as np

from core.kernel_cache import JIT, kernel

_FULL = np.uint8(0)


def bits_for(records: int) -> int:
    """Bytes of a map of ``records`` records."""
    return (records + 7) // 8


@kernel(**JIT)
def mark(bits: np.ndarray, records: np.ndarray, free: bool) -> None:
    """Set (``free``) or clear the bits of ``records``."""
    for r in records:
        byte = r >> 3
        bit = np.uint8(1 << (r & 7))
        if free:
            bits[byte] |= bit
        else:
            bits[byte] &= ~bit


@kernel(**JIT)
def scan(bits: np.ndarray, start: int, end: int, out: np.ndarray) -> tuple[int, int]:
    """The free records from ``start`` up to ``end`` (exclusive), in order, into ``out`` until
    it is full; returns how many and where the scan stopped (one past the last taken, or
    ``end``). A byte with no free record is passed over whole."""
    need = out.shape[0]
    i = start
    k = 0
    while i < end and k < need:
        b = bits[i >> 3]
        if b == _FULL:
            i = (i | 7) + 1
            continue
        if (b >> (i & 7)) & 1:
            out[k] = i
            k += 1
        i += 1
    return k, min(i, end)


def is_free(bits: np.ndarray, records: np.ndarray) -> np.ndarray:
    """Whether each of ``records`` is free (for checks; the tier itself uses the kernels)."""
    return (bits[records >> 3] >> (records & 7).astype(np.uint8)) & 1 == 1
