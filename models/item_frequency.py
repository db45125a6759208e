"""A streaming estimate of how often each item appears per training step, in bounded memory.

Yi et al., RecSys 2019 ("Sampling-bias-corrected neural modeling for large corpus item
recommendations"), Algorithm 1: per hash bucket, ``A`` holds the last step the item was seen
and ``B`` an exponential moving average of the number of steps between two occurrences. The
item's expected count per step is ``1 / B`` (it may exceed 1: an item seen c times in every
step has gaps 1, 0, ..., 0, which average to 1/c). ``hashes`` independent arrays bound the
error of collisions: a collision only shortens the gaps, so the longest gap (the max of B)
is the least contaminated estimate.

Memory is ``hashes * buckets * 12`` bytes whatever the number of items. ``state()`` and
``load_state()`` give the arrays, so the estimate can be saved beside the trainer's pass.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from tables.hashmap import mix64

_JIT = {"cache": True, "nogil": True, "error_model": "numpy"}
_F1 = np.float32(1.0)
_MIN_GAP = np.float32(1e-3)  # bounds 1/B for items seen many times in every step


@njit(**_JIT)
def _bucket(h, row, mask):
    return np.int64(mix64(h ^ (np.uint64(row + 1) * np.uint64(0x9E3779B97F4A7C15))) & mask)


@njit(**_JIT)
def _update(items, step, last, gap, alpha):
    """Algorithm 1 for every occurrence of ``items`` at ``step`` (a new bucket: one occurrence in step + 1 steps)."""
    rows, n_buckets = last.shape
    mask = np.uint64(n_buckets - 1)
    keep = _F1 - alpha
    for i in range(items.shape[0]):
        for r in range(rows):
            b = _bucket(items[i], r, mask)
            if last[r, b] < 0:
                gap[r, b] = np.float32(step + 1)
            else:
                g = keep * gap[r, b] + alpha * np.float32(step - last[r, b])
                gap[r, b] = g if g > _MIN_GAP else _MIN_GAP
            last[r, b] = step


@njit(**_JIT)
def _expected(items, step, last, gap, out):
    """1 / max over hashes of B; an item no bucket has seen counts as once in step + 1 steps."""
    rows, n_buckets = last.shape
    mask = np.uint64(n_buckets - 1)
    for i in range(items.shape[0]):
        best = np.float32(0.0)
        for r in range(rows):
            b = _bucket(items[i], r, mask)
            g = gap[r, b] if last[r, b] >= 0 else np.float32(step + 1)
            if g > best:
                best = g
        out[i] = _F1 / best


class ItemFrequency:
    """Expected occurrences per step of each item (uint64 item hashes), learned from the stream."""

    def __init__(self, buckets: int = 1 << 20, hashes: int = 2, alpha: float = 0.01) -> None:
        if buckets < 1 or buckets & (buckets - 1):
            raise ValueError(f"buckets must be a power of two, got {buckets}")
        self.alpha = np.float32(alpha)
        self.step = 0
        self.last = np.full((hashes, buckets), -1, np.int64)
        self.gap = np.ones((hashes, buckets), np.float32)

    def update(self, items: np.ndarray) -> None:
        """Record one step in which ``items`` occurred (repeats count, as in the stream)."""
        _update(np.ascontiguousarray(items, np.uint64), self.step, self.last, self.gap, self.alpha)
        self.step += 1

    def expected_count(self, items: np.ndarray) -> np.ndarray:
        """float32: estimated occurrences per step of each item (the paper's p = 1/B)."""
        out = np.empty(items.shape[0], np.float32)
        _expected(np.ascontiguousarray(items, np.uint64), max(self.step - 1, 0), self.last, self.gap, out)
        return out

    @property
    def nbytes(self) -> int:
        return int(self.last.nbytes + self.gap.nbytes)

    def state(self) -> dict[str, np.ndarray]:
        return {"last": self.last.copy(), "gap": self.gap.copy(), "step": np.array([self.step], np.int64)}

    def load_state(self, arrays: dict[str, np.ndarray]) -> None:
        from core.errors import CorruptData

        if arrays["last"].shape != self.last.shape or arrays["gap"].shape != self.gap.shape:
            raise CorruptData(f"item frequency state is {arrays['last'].shape}, expected {self.last.shape}")
        self.last[...] = arrays["last"]
        self.gap[...] = arrays["gap"]
        self.step = int(arrays["step"][0])
