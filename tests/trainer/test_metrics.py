"""Bucketed AUC and its exact merge across workers."""

from __future__ import annotations

import numpy as np

from logrecords.generator import roc_auc
from trainer.auc import BucketAUC
from trainer.metrics import Metrics


def test_merged_auc_equals_auc_computed_in_one_place() -> None:
    rng = np.random.default_rng(0)
    probs = rng.random(30_000)
    labels = (rng.random(30_000) < probs).astype(np.float32)
    whole = BucketAUC()
    whole.add(labels, probs)
    parts = [BucketAUC() for _ in range(3)]
    for i, part in enumerate(parts):
        part.add(labels[i::3], probs[i::3])
    merged = BucketAUC().merge(parts[0]).merge(parts[1]).merge(parts[2])
    assert merged.auc() == whole.auc()
    assert abs(whole.auc() - roc_auc(labels, probs)) < 1e-4  # bucket width 2^-16


def test_metrics_merge_and_round_trip() -> None:
    a, b = Metrics(), Metrics()
    a.add(np.array([1, 0, 1.0]), np.array([0.9, 0.2, 0.6]))
    b.add(np.array([0, 0.0]), np.array([0.7, 0.1]))
    both = Metrics()
    both.add(np.array([1, 0, 1, 0, 0.0]), np.array([0.9, 0.2, 0.6, 0.7, 0.1]))
    merged = Metrics.from_arrays(a.to_arrays()).merge(b)
    for key, want in both.summary().items():
        got = merged.summary()[key]
        assert got == want or abs(got - want) < 1e-12, key
    assert BucketAUC().auc() is None


def test_bucket_counts_match_a_histogram_of_the_clipped_buckets():
    """BucketAUC.add counts in place: the same histograms as np.bincount of the clipped buckets,
    edges (0, 1, below 0, above 1) included."""
    rng = np.random.default_rng(3)
    for n_buckets in (1024, 1 << 16):
        p = rng.random(4000)
        p[:5] = [0.0, 1.0, 1.0 - 1e-9, -0.5, 1.5]
        y = (rng.random(4000) < 0.3).astype(np.float32)
        auc = BucketAUC(n_buckets)
        auc.add(y[:1000], p[:1000])
        auc.add(y[1000:], p[1000:])
        b = np.clip((p * n_buckets).astype(np.int64), 0, n_buckets - 1)
        np.testing.assert_array_equal(auc.pos, np.bincount(b[y > 0.5], minlength=n_buckets))
        np.testing.assert_array_equal(auc.neg, np.bincount(b[y <= 0.5], minlength=n_buckets))


def test_metrics_sums_match_numpy_with_clipped_predictions():
    rng = np.random.default_rng(4)
    p = rng.random(3000).astype(np.float32)
    p[:3] = [0.0, 1.0, 0.5]
    y = (rng.random(3000) < 0.3).astype(np.float32)
    m = Metrics()
    m.add(y, p)
    pc = np.clip(p.astype(np.float64), 1e-7, 1 - 1e-7)
    assert m.count == 3000
    assert abs(m.logloss_sum - float(-(y * np.log(pc) + (1 - y) * np.log1p(-pc)).sum())) < 1e-6
    assert abs(m.pred_sum - pc.sum()) < 1e-9 and m.label_sum == y.sum()
    want = BucketAUC()
    want.add(y, pc)
    np.testing.assert_array_equal(m.auc.pos, want.pos)
    np.testing.assert_array_equal(m.auc.neg, want.neg)
