"""Count-min sketch with conservative update: pending counts of not-yet-admitted ids in a
fixed memory budget (``depth * width`` float32), never a growing dict. Estimates never
undercount until ``subtract`` is used; with width w the overcount is at most ~e/w of the
total mass per row."""

from __future__ import annotations

import numpy as np

from core.kernel_cache import JIT, kernel
from tables.hashmap import mix64

_SEEDS = np.array([0x243F6A8885A308D3, 0x13198A2E03707344, 0xA4093822299F31D0, 0x082EFA98EC4E6C89,
                   0x452821E638D01377, 0xBE5466CF34E90C6C, 0xC0AC29B7C97C50DD, 0x3F84D5B5B5470917,
                   0x9216D5D98979FB1B, 0xD1310BA698DFB5AC, 0x2FFD72DBD01ADFB7, 0xB8E1AFED6A267E96,
                   0xBA7C9045F12C7F99, 0x24A19947B3916CF7, 0x0801F2E2858EFC16, 0x636920D871574E69],
                  dtype=np.uint64)


@kernel(**JIT)
def add(table: np.ndarray, seeds: np.ndarray, keys: np.ndarray, amounts: np.ndarray, out: np.ndarray) -> int:
    """Add ``amounts[i]`` to ``keys[i]``; ``out[i]`` = estimate after the add. Returns how many
    keys had a zero estimate before (new pending ids, for the pending-count estimate)."""
    depth, width = table.shape
    w = np.uint64(width)
    fresh = 0
    idx = np.empty(depth, np.int64)
    for i in range(keys.shape[0]):
        est = np.float32(np.inf)
        for r in range(depth):
            idx[r] = np.int64(mix64(keys[i] ^ seeds[r]) % w)
            est = min(est, table[r, idx[r]])
        if est == np.float32(0.0):
            fresh += 1
        new = est + amounts[i]
        for r in range(depth):  # conservative update: raise only the counters below the new estimate
            if table[r, idx[r]] < new:
                table[r, idx[r]] = new
        out[i] = new
    return fresh


@kernel(**JIT)
def subtract(table: np.ndarray, seeds: np.ndarray, keys: np.ndarray, amounts: np.ndarray) -> None:
    """Take ``amounts[i]`` off every counter of ``keys[i]`` (floored at 0). Not ``add`` with a
    negative amount: a conservative update only ever raises counters, so that would be a no-op.
    Counters shared with other keys drop too, so their estimates may undercount afterwards."""
    depth, width = table.shape
    w = np.uint64(width)
    for i in range(keys.shape[0]):
        for r in range(depth):
            j = np.int64(mix64(keys[i] ^ seeds[r]) % w)
            table[r, j] = max(table[r, j] - amounts[i], np.float32(0.0))


class CountMinSketch:
    """Fixed-size pending-count store."""

    def __init__(self, width: int, depth: int) -> None:
        self.table = np.zeros((depth, width), np.float32)
        self._seeds = _SEEDS[:depth].copy()

    def add(self, keys: np.ndarray, amounts: np.ndarray) -> tuple[np.ndarray, int]:
        out = np.empty(keys.shape[0], np.float32)
        fresh = add(self.table, self._seeds, keys, amounts.astype(np.float32, copy=False), out)
        return out, fresh

    def subtract(self, keys: np.ndarray, amounts: np.ndarray) -> None:
        subtract(self.table, self._seeds, keys, amounts.astype(np.float32, copy=False))

    @property
    def nbytes(self) -> int:
        return self.table.nbytes
