"""AUC from bucketed positive/negative histograms (Paddle's fleet.metrics.auc).

Predictions in [0, 1] fall into ``n_buckets`` equal-width buckets; each worker counts
positives and negatives per bucket. Histograms add, so merging the workers' histograms
gives exactly the histogram (and the AUC) of all predictions counted in one place. Within
a bucket, pairs count one half (ties), so the AUC is exact up to the bucket width.
"""

from __future__ import annotations

import numpy as np

DEFAULT_BUCKETS = 1 << 16


class BucketAUC:
    def __init__(self, n_buckets: int = DEFAULT_BUCKETS) -> None:
        self.pos = np.zeros(n_buckets, np.int64)
        self.neg = np.zeros(n_buckets, np.int64)

    @property
    def n_buckets(self) -> int:
        return self.pos.shape[0]

    def add(self, labels: np.ndarray, probs: np.ndarray) -> None:
        b = np.clip((np.asarray(probs, np.float64) * self.n_buckets).astype(np.int64), 0, self.n_buckets - 1)
        clicked = np.asarray(labels) > 0.5
        self.pos += np.bincount(b[clicked], minlength=self.n_buckets)
        self.neg += np.bincount(b[~clicked], minlength=self.n_buckets)

    def merge(self, other: BucketAUC) -> BucketAUC:
        self.pos += other.pos
        self.neg += other.neg
        return self

    def reset(self) -> None:
        self.pos[...] = 0
        self.neg[...] = 0

    def auc(self) -> float | None:
        """None until both classes were seen."""
        n_pos, n_neg = int(self.pos.sum()), int(self.neg.sum())
        if n_pos == 0 or n_neg == 0:
            return None
        # negatives below each bucket, plus half of those in it
        neg_below = np.cumsum(self.neg) - self.neg
        wins = (self.pos * (neg_below + 0.5 * self.neg)).sum()
        return float(wins / (n_pos * n_neg))

    def to_arrays(self) -> dict[str, np.ndarray]:
        return {"auc_pos": self.pos.copy(), "auc_neg": self.neg.copy()}

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray]) -> BucketAUC:
        out = cls(int(arrays["auc_pos"].shape[0]))
        out.pos[...] = arrays["auc_pos"]
        out.neg[...] = arrays["auc_neg"]
        return out
