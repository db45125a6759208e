"""Validation of batch inputs: every bad input becomes an InvalidInput naming what was
wrong, before the table is touched."""

from __future__ import annotations

from typing import Any

import numpy as np

from core.errors import InvalidInput


def as_keys(keys: Any, *, table: str) -> np.ndarray:
    """A contiguous 1-d uint64 array, or InvalidInput. Signed integers are accepted when
    non-negative; floats, bools, strings and out-of-range values are refused."""
    try:
        arr = np.asarray(keys)
    except (ValueError, TypeError) as exc:
        raise InvalidInput(f"table {table}: keys are not an array of integers ({exc})") from None
    if not isinstance(keys, np.ndarray) and arr.dtype.kind == "f":
        # numpy reads a Python list mixing ints >= 2**63 with smaller ones as float64 (losing
        # bits), so valid uint64 keys would be refused: read such sequences element by element.
        arr = np.asarray(keys, dtype=object)
    if arr.dtype == object:
        try:
            arr = np.array([int(k) if isinstance(k, int | np.integer) and not isinstance(k, bool) else _bad(k, table)
                            for k in arr.ravel()], dtype=np.uint64).reshape(arr.shape)
        except OverflowError:
            raise InvalidInput(f"table {table}: keys must be in [0, 2**64-1]") from None
    if arr.ndim != 1:
        raise InvalidInput(f"table {table}: keys must be 1-d, got shape {arr.shape}")
    if arr.dtype == np.uint64:
        return np.ascontiguousarray(arr)
    if arr.dtype.kind == "u":
        return arr.astype(np.uint64)
    if arr.dtype.kind == "i":
        if arr.size and arr.min() < 0:
            i = int(np.argmax(arr < 0))
            raise InvalidInput(f"table {table}: keys must be non-negative uint64, got {int(arr[i])} at index {i}",
                               detail={"index": i})
        return arr.astype(np.uint64)
    if arr.size == 0:
        return np.empty(0, np.uint64)
    raise InvalidInput(f"table {table}: keys must be unsigned 64-bit integers, got dtype {arr.dtype}")


def _bad(k: object, table: str) -> int:
    raise InvalidInput(f"table {table}: keys must be integers, got {type(k).__name__} {k!r:.40}")


def as_matrix(values: Any, n: int, width: int, *, name: str, table: str) -> np.ndarray:
    """A contiguous float32 (n, width) array, or InvalidInput (no silent dtype casts)."""
    if not isinstance(values, np.ndarray):
        raise InvalidInput(f"table {table}: {name} must be a numpy float32 array, got {type(values).__name__}")
    if values.dtype != np.float32:
        raise InvalidInput(f"table {table}: {name} must be float32, got {values.dtype}")
    if values.shape != (n, width):
        raise InvalidInput(f"table {table}: {name} must have shape ({n}, {width}), got {values.shape}")
    return np.ascontiguousarray(values)


def as_counts(values: Any, n: int, *, name: str, table: str, default: float) -> np.ndarray:
    """Per-key show or click counts as float32 (n,), ``default`` when None."""
    if values is None:
        return np.full(n, default, np.float32)
    arr = np.asarray(values)
    if arr.dtype.kind not in "iuf" or arr.shape != (n,):
        raise InvalidInput(f"table {table}: {name} must be a numeric array of shape ({n},), "
                           f"got {arr.dtype} {arr.shape}")
    arr = arr.astype(np.float32)
    if arr.size and (arr.min() < 0):
        raise InvalidInput(f"table {table}: {name} must be non-negative")
    return arr
