"""Admission policies: always, count threshold, probability, score threshold."""

from __future__ import annotations

import numpy as np
import pytest

from tables.initializers import initial_rows
from tables.sparse_table import SparseTable
from tables.table_config import (
    AlwaysAdmission,
    CountAdmission,
    InitializerConfig,
    OptimizerConfig,
    ProbabilityAdmission,
    ScoreAdmission,
    TableConfig,
)

SGD = OptimizerConfig(kind="sgd", lr=1.0)
INIT = InitializerConfig(kind="uniform", scale=0.1)


def table(admission: object, seed: int = 5) -> SparseTable:
    return SparseTable(TableConfig(name="t", dim=3, seed=seed, initializer=INIT, optimizer=SGD,
                                   admission=admission))


def init_of(keys: list[int], seed: int = 5) -> np.ndarray:
    return initial_rows(np.array(keys, np.uint64), 3, seed=seed, kind="uniform", scale=0.1)


def ones(n: int) -> np.ndarray:
    return np.ones((n, 3), np.float32)


def test_always_admits_on_first_push() -> None:
    t = table(AlwaysAdmission())
    keys = [0, 2**63, 2**64 - 1, 17]
    assert not t.contains(keys).any()
    t.push([*keys, 17], ones(5))
    assert t.contains(keys).all()
    np.testing.assert_allclose(t.pull(keys), init_of(keys) - np.array([[1], [1], [1], [2]]), rtol=1e-6)
    s = t.stats()
    assert (s["admitted"], s["not_admitted"], s["pending_estimate"], s["rows"]) == (4, 0, 0, 4)


def test_count_threshold_admits_after_n_sightings() -> None:
    t = table(CountAdmission(min_count=3, sketch_width=4096))
    k = [2**64 - 1]
    for sighting in (1, 2):
        t.push(k, ones(1))
        assert not t.contains(k)[0], f"admitted after {sighting} sightings"
        assert t.size() == 0
        np.testing.assert_array_equal(t.pull(k), init_of(k))  # the initializer row, not stored
        s = t.stats()
        assert (s["not_admitted"], s["admitted"], s["pending_estimate"]) == (sighting, 0, 1)
    assert t.stats()["rejected_pulls"] == 2
    t.push(k, ones(1))  # third sighting: row created, then this push's update applied
    assert t.contains(k)[0]
    np.testing.assert_allclose(t.pull(k), init_of(k) - 1.0, rtol=1e-6)
    s = t.stats()
    assert (s["admitted"], s["pending_estimate"], s["not_admitted"], s["rows"]) == (1, 0, 2, 1)
    assert s["rejected_pulls"] == 2, "a pull of a stored row is not a rejected pull"


def test_count_threshold_counts_duplicates_and_shows() -> None:
    t = table(CountAdmission(min_count=3, sketch_width=4096))
    t.push([1, 1, 2], ones(3))  # id 1 seen twice, id 2 once
    assert t.contains([1, 2]).tolist() == [False, False]
    t.push([1, 2], ones(2))  # id 1: third sighting
    assert t.contains([1, 2]).tolist() == [True, False]
    t.push([3], ones(1), shows=[3.0])  # one occurrence showing 3 times counts 3
    assert t.contains([3])[0]
    t.push([4], ones(1), shows=[2.0])
    assert not t.contains([4])[0]


def test_count_sketch_memory_is_fixed_and_pending_estimate_close() -> None:
    t = table(CountAdmission(min_count=1000))  # default sketch: 4 x 2**20
    before = t.stats()["admission_bytes"]
    assert before == 4 * (1 << 20) * 4
    rng = np.random.default_rng(0)
    ids = np.unique(rng.integers(0, 2**64 - 1, size=100_000, dtype=np.uint64, endpoint=True))
    for a in range(0, ids.shape[0], 20_000):
        part = ids[a : a + 20_000]
        t.push(part, np.zeros((part.shape[0], 3), np.float32))
    s = t.stats()
    assert s["admission_bytes"] == before
    assert s["rows"] == 0 and s["admitted"] == 0
    assert abs(s["pending_estimate"] - ids.shape[0]) <= 0.01 * ids.shape[0]
    assert s["not_admitted"] == ids.shape[0]
    t.push(ids[:1000], np.zeros((1000, 3), np.float32))  # repeats are not new pending ids
    assert abs(t.stats()["pending_estimate"] - ids.shape[0]) <= 0.01 * ids.shape[0]


def test_probability_fraction_and_determinism() -> None:
    p = 0.25
    ids = np.arange(1, 20_001, dtype=np.uint64) * np.uint64(2654435761)
    a, b, c = table(ProbabilityAdmission(probability=p), seed=9), table(ProbabilityAdmission(probability=p), seed=9), \
        table(ProbabilityAdmission(probability=p), seed=10)
    for t in (a, b, c):
        t.push(ids, np.zeros((ids.shape[0], 3), np.float32))
    frac = a.contains(ids).mean()
    assert abs(frac - p) < 0.02  # std of the fraction is ~0.003
    assert a.stats()["admitted"] == a.size() == int(a.contains(ids).sum())
    assert a.stats()["not_admitted"] == ids.shape[0] - a.size()
    assert a.stats()["pending_estimate"] == 0, "no per-id memory: pending ids are not tracked"
    assert np.array_equal(a.contains(ids), b.contains(ids)), "same seed, same pushes: same decisions"
    assert not np.array_equal(a.contains(ids), c.contains(ids)), "another seed decides otherwise"
    # Each push of a still-unknown id is a new draw: after a second push ~1 - (1-p)^2 are in.
    a.push(ids, np.zeros((ids.shape[0], 3), np.float32))
    assert abs(a.contains(ids).mean() - (1 - (1 - p) ** 2)) < 0.02


@pytest.mark.parametrize(
    ("show", "click", "admitted"),
    [(5.0, 0.0, False), (10.0, 0.0, True), (1.0, 1.0, True), (3.0, 0.5, False), (3.0, 0.9, True),
     (0.0, 0.0, False)],
)
def test_score_threshold_formula(show: float, click: float, admitted: bool) -> None:
    cfg = ScoreAdmission(threshold=1.0, nonclick_coeff=0.1, click_coeff=1.0, sketch_width=4096)
    expect = (show - click) * 0.1 + click * 1.0 >= 1.0
    assert expect == admitted  # the table above is the formula's, not the code's
    t = table(cfg)
    t.push([42], ones(1), shows=[show], clicks=[click])
    assert t.contains([42])[0] == admitted
    s = t.stats()
    assert (s["admitted"], s["not_admitted"]) == (int(admitted), int(not admitted))


def test_score_threshold_accumulates_over_pushes() -> None:
    t = table(ScoreAdmission(threshold=1.0, nonclick_coeff=0.1, click_coeff=1.0, sketch_width=4096))
    t.push([8, 9], ones(2), shows=[4, 1], clicks=[0, 0])  # scores 0.4, 0.1
    assert not t.contains([8, 9]).any()
    np.testing.assert_array_equal(t.pull([8, 9]), init_of([8, 9]))
    t.push([8, 9], ones(2), shows=[6, 1], clicks=[0, 0])  # 1.0, 0.2
    assert t.contains([8, 9]).tolist() == [True, False]
    np.testing.assert_allclose(t.pull([8]), init_of([8]) - 1.0, rtol=1e-6)
    t.push([9], ones(1), shows=[1], clicks=[1])  # show 3, click 1: 0.2 + 1.0
    assert t.contains([9])[0]
    s = t.stats()
    assert (s["admitted"], s["pending_estimate"], s["not_admitted"]) == (2, 0, 3)
