"""Standardizing logs (``standardize`` with ``log: true``) against its per-element definition, its running
statistics against the logs' mean and std, and the transform ``schema infer`` proposes for each shape of
field: a long right tail as logs, the rest standardized as it is, a rate in [0, 1] as it is."""

from __future__ import annotations

import math

import numpy as np

from logrecords.dense_transform import (
    IdentityTransform,
    Log1pTransform,
    StandardizeTransform,
    apply_dense_transforms,
)
from logrecords.schema_inference import propose_transform
from models.dense_statistics import DenseStatistics

LOGS = StandardizeTransform(log=True, mean=2.0, std=0.5, clip=3.0, prior_count=0)
RAW = StandardizeTransform(mean=2.0, std=0.5, clip=3.0, prior_count=0)


def test_standardized_logs_equal_the_per_element_definition() -> None:
    dense = np.array([[0.0, 0.0], [-4.0, -4.0], [6.389, 6.389], [1e30, 1e30], [math.nan, math.nan]], np.float32)
    got = apply_dense_transforms(dense, (LOGS, RAW))
    for i, row in enumerate(dense):
        x = float(row[0]) if math.isfinite(row[0]) else 0.0
        want_log = min(max((math.log1p(max(x, 0.0)) - 2.0) / 0.5, -3.0), 3.0)
        want_raw = min(max((x - 2.0) / 0.5, -3.0), 3.0)
        assert math.isclose(got[i, 0], want_log, rel_tol=1e-5, abs_tol=1e-5), (i, got[i, 0], want_log)
        assert math.isclose(got[i, 1], want_raw, rel_tol=1e-5, abs_tol=1e-5), (i, got[i, 1], want_raw)
    assert dense[2, 0] == np.float32(6.389)  # the input is not changed


def test_the_running_statistics_of_a_log_field_are_its_logs() -> None:
    rng = np.random.default_rng(1)
    stats = DenseStatistics((LOGS, RAW))
    seen = []
    for n in (5, 40, 300):
        dense = rng.lognormal(3.0, 1.0, (n, 2)).astype(np.float32)
        stats.observe(dense)
        seen.append(dense.astype(np.float64))
    values = np.concatenate(seen)
    mean, std = stats.mean_std()
    np.testing.assert_allclose(mean, [np.log1p(values[:, 0]).mean(), values[:, 1].mean()], rtol=1e-10)
    np.testing.assert_allclose(std, [np.log1p(values[:, 0]).std(), values[:, 1].std()], rtol=1e-8)
    used = stats.transforms()
    assert used[0].log and not used[1].log  # the running values replace mean and std, not the kind


def test_infer_proposes_logs_for_a_long_right_tail_and_standardizes_the_rest() -> None:
    rng = np.random.default_rng(2)
    incomes = rng.lognormal(10.0, 1.0, 2000)
    t, why = propose_transform(incomes)
    assert isinstance(t, StandardizeTransform) and t.log and t.prior_count == 2000
    assert math.isclose(t.mean, float(np.log1p(incomes).mean())) and math.isclose(t.std, float(np.log1p(incomes).std()))
    assert "skew" in why and "log1p" in why
    minutes = rng.normal(180.0, 50.0, 2000).clip(0.0)  # near-symmetric: its logs would skew it left
    t, _ = propose_transform(minutes)
    assert isinstance(t, StandardizeTransform) and not t.log and math.isclose(t.mean, float(minutes.mean()))
    signed = rng.standard_t(3, 2000) * 100.0
    t, why = propose_transform(signed)
    assert isinstance(t, StandardizeTransform) and not t.log and why.startswith("signed")
    t, _ = propose_transform(rng.uniform(0.0, 1.0, 500))
    assert isinstance(t, IdentityTransform)
    t, _ = propose_transform(np.full(100, 7.0))
    assert isinstance(t, Log1pTransform)
