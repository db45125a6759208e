"""Sparse value text -> uint64 feature id, with the slot mixed in.

An id is ``slot_id << 56 | h`` where ``h`` is a 56-bit value derived from the text (see
:class:`logrecords.schema_config.HashKind`). The slot occupies the top byte, so equal strings in
different slots can never collide; within a slot, ``hex`` and ``int`` are lossless and
``fnv1a`` collides only as a 56-bit hash does. The kernels work on one bytes buffer plus
token bounds, so a whole batch is hashed without a Python loop.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from core.kernel_cache import kernel
from logrecords.schema_config import HashKind

SLOT_SHIFT = 56
LOW_MASK = (1 << SLOT_SHIFT) - 1

KIND_CODE = {HashKind.FNV1A: 0, HashKind.HEX: 1, HashKind.INT: 2}

_FNV_OFFSET = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)
_MASK56 = np.uint64(LOW_MASK)
_INT_LIMIT = np.uint64(1 << SLOT_SHIFT)


@kernel(inline="always")
def _avalanche(z: np.uint64) -> np.uint64:
    # splitmix64 finalizer: FNV alone mixes the low bits poorly for short strings.
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@kernel(inline="always")
def token_id(buf: np.ndarray, start: int, end: int, kind: int, slot_id: int) -> tuple[bool, np.uint64]:
    """Id of ``buf[start:end]``; ``(False, 0)`` when the text is not valid for ``kind``."""
    prefix = np.uint64(slot_id) << np.uint64(SLOT_SHIFT)
    if kind == 0:
        h = _FNV_OFFSET
        for k in range(start, end):
            h = (h ^ np.uint64(buf[k])) * _FNV_PRIME
        return True, prefix | (_avalanche(h) & _MASK56)
    if end <= start:
        return False, np.uint64(0)
    v = np.uint64(0)
    if kind == 1:
        if end - start > 14:
            return False, np.uint64(0)
        for k in range(start, end):
            c = buf[k]
            if 48 <= c <= 57:
                d = c - 48
            elif 97 <= c <= 102:
                d = c - 87
            elif 65 <= c <= 70:
                d = c - 55
            else:
                return False, np.uint64(0)
            v = (v << np.uint64(4)) | np.uint64(d)
        return True, prefix | v
    if end - start > 17:
        return False, np.uint64(0)
    for k in range(start, end):
        c = buf[k]
        if c < 48 or c > 57:
            return False, np.uint64(0)
        v = v * np.uint64(10) + np.uint64(c - 48)
    if v >= _INT_LIMIT:
        return False, np.uint64(0)
    return True, prefix | v


@kernel()
def _hash_tokens(buf: np.ndarray, bounds: np.ndarray, kind: int, slot_id: int) -> tuple[np.ndarray, np.ndarray]:
    n = bounds.shape[0] - 1
    ids = np.zeros(n, dtype=np.uint64)
    ok = np.zeros(n, dtype=np.bool_)
    for i in range(n):
        good, v = token_id(buf, bounds[i], bounds[i + 1], kind, slot_id)
        ok[i] = good
        ids[i] = v
    return ids, ok


def hash_tokens(tokens: Sequence[bytes], *, slot_id: int, kind: HashKind) -> tuple[np.ndarray, np.ndarray]:
    """Ids of byte strings in one slot: ``(ids uint64[n], valid bool[n])``."""
    bounds = np.zeros(len(tokens) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, tokens), dtype=np.int64, count=len(tokens)), out=bounds[1:])
    buf = np.frombuffer(b"".join(tokens), dtype=np.uint8) if tokens else np.zeros(0, np.uint8)
    return _hash_tokens(buf, bounds, KIND_CODE[kind], slot_id)


def hash_strings(values: Sequence[str], *, slot_id: int, kind: HashKind) -> tuple[np.ndarray, np.ndarray]:
    """Ids of text values in one slot (UTF-8 encoded)."""
    return hash_tokens([v.encode("utf-8", "surrogatepass") for v in values], slot_id=slot_id, kind=kind)


def slot_of(ids: np.ndarray) -> np.ndarray:
    """The slot id each feature id carries."""
    return (np.asarray(ids, dtype=np.uint64) >> np.uint64(SLOT_SHIFT)).astype(np.int64)
