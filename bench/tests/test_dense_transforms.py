"""The variants of bench/dense_transforms.py rewrite the records they are given as their docstrings say."""

from __future__ import annotations

import math

import numpy as np

from bench.dense_transforms import bucketize, load_records, logged, with_transforms


def test_records_carry_a_0_1_label_and_leave_missing_values_out():
    records = load_records("credit_data")
    assert len(records) == 4454 and {r["label"] for r in records} == {0, 1}
    assert all("Status" not in r and "rownames" not in r for r in records)
    assert any("Income" not in r for r in records)  # the data set's NA incomes are absent, not NaN
    assert all(math.isfinite(r["Income"]) for r in records if "Income" in r)


def test_buckets_are_the_training_quantiles_and_missing_is_its_own():
    train = [{"x": float(v)} for v in range(100)]
    test = [{"x": -5.0}, {"x": 49.0}, {"x": 1e9}, {}]
    b_train, b_test = bucketize(train, test, ["x"], buckets=4)
    assert [r["x"] for r in b_train[::25]] == ["b0", "b1", "b2", "b3"]
    assert sum(r["x"] == "b0" for r in b_train) == 25
    assert [r["x"] for r in b_test] == ["b0", "b1", "b3", "missing"]
    assert train[0] == {"x": 0.0}  # the input is not changed


def test_logged_and_with_transforms_touch_only_the_named_dense_fields():
    recs = [{"a": 3.0, "b": -2.0, "c": "z"}, {"a": None, "b": 0.0, "c": "y"}]
    out = logged(recs, ["a", "b"])
    assert np.isclose(out[0]["a"], np.log1p(3.0)) and out[0]["b"] == 0.0 and out[0]["c"] == "z"
    assert out[1]["a"] is None
    config = {"schema": {"slots": [{"name": "a", "kind": "dense", "transform": {"kind": "none"}},
                                   {"name": "c", "kind": "sparse"}]}}
    changed = with_transforms(config, lambda f: {"kind": "standardize", "mean": 1.0, "std": 2.0})
    assert changed["schema"]["slots"][0]["transform"] == {"kind": "standardize", "mean": 1.0, "std": 2.0}
    assert changed["schema"]["slots"][1] == {"name": "c", "kind": "sparse"}
    assert with_transforms(config, lambda f: None)["schema"]["slots"][0] == {"name": "a", "kind": "dense"}
    assert config["schema"]["slots"][0]["transform"] == {"kind": "none"}  # a copy was changed
