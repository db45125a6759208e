"""Deterministic row initializers: the value of element j of key k depends only on
(table seed, k, j), so a row re-created after eviction is bit-identical, and a pull of an
unknown id returns exactly the row a later admission would create."""

from __future__ import annotations

import numpy as np

from core.kernel_cache import JIT, kernel
from tables.hashmap import mix64

ZEROS, UNIFORM, NORMAL = 0, 1, 2
KIND_CODES = {"zeros": ZEROS, "uniform": UNIFORM, "normal": NORMAL}
# The wide weight draws from seed ^ WIDE_SEED_SALT, so it is not the embedding's first element.
WIDE_SEED_SALT = 0x5EED_0F_3A11_DE

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_S40 = np.uint64(40)
_LOW24 = np.uint64(0xFFFFFF)
_INV24 = np.float32(1.0 / (1 << 24))
_TWO_PI = np.float32(6.283185307179586)
_ONE32 = np.float32(1.0)
_TWO32 = np.float32(2.0)
_MINUS2 = np.float32(-2.0)


@kernel(inline="always", **JIT)
def fill_row(out: np.ndarray, c0: int, d: int, key: np.uint64, seed: np.uint64, kind: int, scale: np.float32) -> None:
    """Write the initial values of ``key`` into ``out[c0:c0+d]``."""
    if kind == ZEROS:
        for j in range(d):
            out[c0 + j] = np.float32(0.0)
        return
    base = mix64(key ^ mix64(seed))
    for j in range(d):
        h = mix64(base + np.uint64(j + 1) * _GOLDEN)
        if kind == UNIFORM:
            u = np.float32(h >> _S40) * _INV24  # [0, 1)
            out[c0 + j] = (u * _TWO32 - _ONE32) * scale
        else:
            u1 = (np.float32(h >> _S40) + _ONE32) * _INV24  # (0, 1]
            u2 = np.float32(h & _LOW24) * _INV24
            out[c0 + j] = np.sqrt(_MINUS2 * np.log(u1)) * np.cos(_TWO_PI * u2) * scale


@kernel(**JIT)
def fill_rows(
    out: np.ndarray, out_rows: np.ndarray, c0: int, d: int, keys: np.ndarray, seed: np.uint64, kind: int,
    scale: np.float32,
) -> None:
    """``out[out_rows[i], c0:c0+d]`` = initial values of ``keys[i]``."""
    for i in range(keys.shape[0]):
        fill_row(out[out_rows[i]], c0, d, keys[i], seed, kind, scale)


def initial_rows(keys: np.ndarray, d: int, *, seed: int, kind: str, scale: float) -> np.ndarray:
    """The initial (n, d) float32 values of ``keys`` (convenience for tests and tools)."""
    out = np.empty((keys.shape[0], d), np.float32)
    fill_rows(out, np.arange(keys.shape[0]), 0, d, keys.astype(np.uint64), np.uint64(seed), KIND_CODES[kind],
              np.float32(scale))
    return out
