"""A streaming estimate of how often each item appears per training step, in bounded memory.

Yi et al., RecSys 2019 ("Sampling-bias-corrected neural modeling for large corpus item
recommendations"), Algorithm 1: per hash bucket, ``A`` holds the last step the item was seen
and ``B`` an exponential moving average of the number of steps between two occurrences. The
item's expected count per step is ``1 / B`` (it may exceed 1: an item seen c times in every
step has gaps 1, 0, ..., 0, which average to 1/c). ``hashes`` independent arrays bound the
error of collisions: a collision only shortens the gaps, so the longest gap (the max of B)
is the least contaminated estimate.

One change to the paper's rule: the average is bias-corrected as Adam's moments are (Kingma &
Ba, section 3): ``W`` sums the weights the samples got, and the estimate is ``B / W``. Without
it the bucket's first sample (the censored gap ``step + 1`` of the item's first occurrence)
keeps weight ``(1 - alpha)^n`` after n more gaps, i.e. more than half for any item seen fewer
than ~70 times at alpha 0.01, and the logQ correction that reads the estimate becomes a random
per-item bias of the served scores (the towers learn ``log p(item | user) - log q`` as if q were
right). Measured on bench/retrieval's planted train stream (704 steps of 256 records): the log
of the estimate against each item's counted rate, std 0.43 -> 0.05; a worker reading half the
stream (one of two trainers), 0.59 -> 0.05.

Memory is ``hashes * buckets * 16`` bytes whatever the number of items. ``state()`` and
``load_state()`` give the arrays, so the estimate can be saved beside the trainer's pass.

This estimate is one worker's. Where several trainers share a parameter server, the paper puts
the arrays there, so that every worker reads the rate of the whole stream:
:class:`FrequencyEstimate` is what the model asks of either (``trainer.shared_frequency``).
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from core.kernel_cache import JIT, kernel
from tables.hashmap import mix64

_F1 = np.float32(1.0)
_MIN_GAP = np.float32(1e-3)  # bounds 1/B for items seen many times in every step


@kernel(**JIT)
def _bucket(h, row, mask):
    return np.int64(mix64(h ^ (np.uint64(row + 1) * np.uint64(0x9E3779B97F4A7C15))) & mask)


@kernel(**JIT)
def _update(items, step, last, gap, weight, alpha):
    """Algorithm 1 for every occurrence of ``items`` at ``step`` (a new bucket's first gap: step + 1)."""
    rows, n_buckets = last.shape
    mask = np.uint64(n_buckets - 1)
    keep = _F1 - alpha
    for i in range(items.shape[0]):
        for r in range(rows):
            b = _bucket(items[i], r, mask)
            g = np.float32(step + 1) if last[r, b] < 0 else np.float32(step - last[r, b])
            gap[r, b] = keep * gap[r, b] + alpha * g
            weight[r, b] = keep * weight[r, b] + alpha
            last[r, b] = step


@kernel(**JIT)
def _expected(items, step, last, gap, weight, out):
    """1 / max over hashes of B / W; an item no bucket has seen counts as once in step + 1 steps."""
    rows, n_buckets = last.shape
    mask = np.uint64(n_buckets - 1)
    for i in range(items.shape[0]):
        best = np.float32(0.0)
        for r in range(rows):
            b = _bucket(items[i], r, mask)
            if last[r, b] >= 0:
                g = gap[r, b] / weight[r, b]
                g = g if g > _MIN_GAP else _MIN_GAP
            else:
                g = np.float32(step + 1)
            if g > best:
                best = g
        out[i] = _F1 / best


class FrequencyEstimate(Protocol):
    def observe(self, observed: np.ndarray, asked: np.ndarray) -> np.ndarray:
        """Count one step in which the item hashes ``observed`` occurred (repeats count), then
        return the expected occurrences per step of each of ``asked`` (float32)."""
        ...


def reader_alpha(alpha: float, readers: int) -> float:
    """The moving average's rate for a worker reading one of ``readers`` parts of the stream, where
    ``alpha`` is per occurrence in the whole stream: such a worker sees an item 1/readers as often,
    so at ``alpha`` its estimate would average ``readers`` times the span of the stream, and lag a
    drifting rate as much. ``1 - (1 - alpha) ** readers`` gives each of its gaps the weight that
    ``readers`` gaps of the whole stream have (the same span; fewer samples, so more noise: one
    estimate shared by the workers would have none of it).

    In-process on MovieLens 100K two workers recalled better with it than at the configured rate
    (bench/RESULTS.md)."""
    return float(1.0 - (1.0 - alpha) ** readers)


class ItemFrequency:
    """Expected occurrences per step of each item (uint64 item hashes), learned from the stream."""

    def __init__(self, buckets: int = 1 << 20, hashes: int = 2, alpha: float = 0.01) -> None:
        if buckets < 1 or buckets & (buckets - 1):
            raise ValueError(f"buckets must be a power of two, got {buckets}")
        self.alpha = np.float32(alpha)
        self.step = 0
        self.last = np.full((hashes, buckets), -1, np.int64)
        self.gap = np.zeros((hashes, buckets), np.float32)
        self.weight = np.zeros((hashes, buckets), np.float32)  # sum of the weights of B's samples

    def update(self, items: np.ndarray) -> None:
        """Record one step in which ``items`` occurred (repeats count, as in the stream)."""
        _update(np.ascontiguousarray(items, np.uint64), self.step, self.last, self.gap, self.weight, self.alpha)
        self.step += 1

    def observe(self, observed: np.ndarray, asked: np.ndarray) -> np.ndarray:
        self.update(observed)
        return self.expected_count(asked)

    def expected_count(self, items: np.ndarray) -> np.ndarray:
        """float32: estimated occurrences per step of each item (the paper's p = 1/B)."""
        out = np.empty(items.shape[0], np.float32)
        _expected(np.ascontiguousarray(items, np.uint64), max(self.step - 1, 0), self.last, self.gap, self.weight,
                  out)
        return out

    @property
    def nbytes(self) -> int:
        return int(self.last.nbytes + self.gap.nbytes + self.weight.nbytes)

    def state(self) -> dict[str, np.ndarray]:
        return {"last": self.last.copy(), "gap": self.gap.copy(), "weight": self.weight.copy(),
                "step": np.array([self.step], np.int64)}

    def load_state(self, arrays: dict[str, np.ndarray]) -> None:
        from core.errors import CorruptData

        if arrays["last"].shape != self.last.shape or arrays["gap"].shape != self.gap.shape:
            raise CorruptData(f"item frequency state is {arrays['last'].shape}, expected {self.last.shape}")
        self.last[...] = arrays["last"]
        self.gap[...] = arrays["gap"]
        # a state saved before the bias correction holds B itself: a weight of 1 reads it unchanged
        self.weight[...] = arrays["weight"] if "weight" in arrays else np.where(self.last >= 0, _F1, 0.0)
        self.step = int(arrays["step"][0])
