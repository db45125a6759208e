"""Progressive-validation metrics: every batch is scored before it is trained on.

``Metrics`` accumulates AUC histograms, log loss, mean prediction and click rate; the
worker keeps one for the whole pass and one for the current window of ``window`` records,
whose summaries it keeps (newest last). Metrics of several workers merge exactly.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from core.kernel_cache import kernel
from trainer.auc import DEFAULT_BUCKETS, BucketAUC

_EPS = 1e-7


@kernel(nogil=True, error_model="numpy")
def _sums(labels: np.ndarray, probs: np.ndarray) -> tuple[float, float, float]:
    """(log loss, prediction, label) sums over the batch, predictions clipped to [eps, 1 - eps]:
    one pass in float64 (numpy's took ten temporaries, per metrics object, per step)."""
    loss, psum, ysum = 0.0, 0.0, 0.0
    for i in range(probs.shape[0]):
        p = min(max(np.float64(probs[i]), _EPS), 1.0 - _EPS)
        y = np.float64(labels[i])
        loss -= y * np.log(p) + (1.0 - y) * np.log1p(-p)
        psum += p
        ysum += y
    return loss, psum, ysum


class Metrics:
    def __init__(self, n_buckets: int = DEFAULT_BUCKETS) -> None:
        self.auc = BucketAUC(n_buckets)
        self.count = 0
        self.logloss_sum = 0.0
        self.pred_sum = 0.0
        self.label_sum = 0.0

    def add(self, labels: np.ndarray, probs: np.ndarray) -> None:
        y, p = np.asarray(labels), np.asarray(probs)
        self.auc.add(y, p)  # clipping to [eps, 1 - eps] leaves every bucket as it is
        loss, psum, ysum = _sums(y, p)
        self.count += int(y.shape[0])
        self.logloss_sum += loss
        self.pred_sum += psum
        self.label_sum += ysum

    def merge(self, other: Metrics) -> Metrics:
        self.auc.merge(other.auc)
        self.count += other.count
        self.logloss_sum += other.logloss_sum
        self.pred_sum += other.pred_sum
        self.label_sum += other.label_sum
        return self

    def summary(self) -> dict[str, Any]:
        n = max(1, self.count)
        ctr = self.label_sum / n
        return {"records": self.count, "auc": self.auc.auc(), "logloss": self.logloss_sum / n if self.count else None,
                "mean_prediction": self.pred_sum / n if self.count else None, "ctr": ctr if self.count else None,
                # calibration: mean prediction over actual CTR (1 = calibrated)
                "calibration": (self.pred_sum / self.label_sum) if self.label_sum else None}

    def to_arrays(self) -> dict[str, np.ndarray]:
        sums = np.array([self.count, self.logloss_sum, self.pred_sum, self.label_sum], np.float64)
        return {**self.auc.to_arrays(), "sums": sums}

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray]) -> Metrics:
        m = cls(int(arrays["auc_pos"].shape[0]))
        m.auc = BucketAUC.from_arrays(arrays)
        count, m.logloss_sum, m.pred_sum, m.label_sum = (float(x) for x in arrays["sums"])
        m.count = int(count)
        return m


class WindowedMetrics:
    """Pass-wide metrics plus summaries of consecutive windows of ``window`` records."""

    def __init__(self, window: int = 100_000, *, keep: int = 100) -> None:
        self.window = window
        self.keep = keep
        self.total = Metrics()
        self.current = Metrics(1024)  # windows are summaries only: coarse buckets are enough
        self.windows: list[dict[str, Any]] = []

    def add(self, labels: np.ndarray, probs: np.ndarray) -> None:
        self.total.add(labels, probs)
        self.current.add(labels, probs)
        if self.current.count >= self.window:
            self.windows = [*self.windows[-(self.keep - 1):], self.current.summary()]
            self.current = Metrics(1024)

    def summary(self) -> dict[str, Any]:
        return {**self.total.summary(), "windows": list(self.windows)}
