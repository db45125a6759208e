"""bench.retrieval_foldin, the user fit bench/retrieval_ceiling.py measures planted's ceiling with:
its Newton solution is the objective's maximum (checked against the objective itself), and enough
picks of a planted user recover that user's vector."""

from __future__ import annotations

import numpy as np
import pytest

from bench.retrieval_data import PlantedSpec, planted, time_split
from bench.retrieval_foldin import fold_in, objective, recency_weights


def _numeric_gradient(x: np.ndarray, *args: object) -> np.ndarray:
    eps, g = 1e-6, np.zeros_like(x)
    for k in range(x.shape[0]):
        step = np.zeros_like(x)
        step[k] = eps
        g[k] = (objective(x + step, *args) - objective(x - step, *args)) / (2 * eps)  # type: ignore[arg-type]
    return g


def test_the_fit_is_the_objectives_maximum() -> None:
    rng = np.random.default_rng(0)
    base, vectors = rng.normal(size=30), rng.normal(size=(30, 4))
    positives, weights = np.array([3, 3, 7, 12, 29]), np.array([1.0, 0.5, 2.0, 1.0, 0.25])
    args = (base, vectors, positives, weights, 0.7)
    x = fold_in(base, vectors, positives, weights, prior=0.7)
    np.testing.assert_allclose(_numeric_gradient(x, *args), 0.0, atol=1e-6)
    best = objective(x, *args)
    for _ in range(50):  # concave: every step away from the maximum is downhill
        assert objective(x + 0.05 * rng.normal(size=4), *args) < best


def test_no_positives_no_correction_and_bad_arguments_are_named() -> None:
    rng = np.random.default_rng(1)
    base, vectors = rng.normal(size=10), rng.normal(size=(10, 3))
    np.testing.assert_array_equal(fold_in(base, vectors, np.zeros(0, np.int64), prior=1.0), 0.0)
    with pytest.raises(ValueError, match="prior"):
        fold_in(base, vectors, np.array([1]), prior=0.0)
    with pytest.raises(ValueError, match="one length"):
        fold_in(base, vectors, np.array([1, 2]), np.ones(3), prior=1.0)


def test_a_users_picks_recover_the_users_vector() -> None:
    rng = np.random.default_rng(2)
    vectors = rng.normal(size=(200, 8))
    truth = rng.normal(size=8)
    logits = vectors @ truth
    picks = np.argmax(logits + rng.gumbel(size=(400, 200)), axis=1)  # 400 softmax draws
    x = fold_in(np.zeros(200), vectors, picks, prior=100.0)
    assert x @ truth / np.linalg.norm(x) / np.linalg.norm(truth) > 0.95


def test_recency_weights_halve_per_half_life_back_from_the_newest() -> None:
    np.testing.assert_allclose(recency_weights(3, 1.0), [0.25, 0.5, 1.0])
    np.testing.assert_array_equal(recency_weights(4, 0.0), 1.0)


def test_planted_carries_its_true_item_vectors_through_the_split() -> None:
    log = planted(PlantedSpec(events=2_000, users=50, items=40))
    split = time_split(log)
    assert split.train.item_factors is log.item_factors and split.test.item_bias is log.item_bias
    assert log.item_factors.shape == (40, 16) and log.item_bias.shape == (40,)
    np.testing.assert_allclose(np.linalg.norm(log.item_factors, axis=1), 1.0)
