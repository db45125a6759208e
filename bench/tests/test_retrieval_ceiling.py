"""bench/retrieval_ceiling.py: the user's fit against its objective (a slow reference), what it recovers
of a known user, and the ceiling row of a planted log and of a log without true items."""

from __future__ import annotations

import numpy as np
import pytest

from bench.retrieval import targets
from bench.retrieval_ceiling import UserRecords, ceiling, fit, objective, ranking_scores, recency_weights
from bench.retrieval_data import Interactions, TrueItems, planted, time_split
from logrecords.generator import InteractionSpec


def _items(n: int = 60, dim: int = 4, seed: int = 0) -> TrueItems:
    rng = np.random.default_rng(seed)
    v = rng.normal(size=(n, dim))
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    return TrueItems(np.arange(1, n + 1, dtype=np.int64), v, -0.5 * np.log1p(rng.permutation(n)), 6.0, 4.0, -1.0)


def _draw(items: TrueItems, x: np.ndarray, n: int, seed: int = 1) -> UserRecords:
    """``n`` records of a user with factor ``x`` (on the pick's scale), drawn as the planted generator draws."""
    rng = np.random.default_rng(seed)
    z = items.bias + items.factors @ x
    p = np.exp(z - z.max())
    rows = rng.choice(len(p), size=n, p=p / p.sum())
    like = 1.0 / (1.0 + np.exp(-(items.like_scale / items.pick_scale * (items.factors[rows] @ x) + items.like_bias)))
    return UserRecords(rows.astype(np.int64), (rng.random(n) < like).astype(np.float64))


@pytest.mark.parametrize("every_record", [False, True])
def test_the_fit_is_the_objectives_maximum(every_record: bool) -> None:
    items = _items()
    user = _draw(items, 6.0 * items.factors[3], 40)
    w = recency_weights(40, 15.0)
    x = fit(items, user, w, prior=3.0, every_record=every_record)
    f = objective(x, items, user, w, 3.0, every_record)
    eps = 1e-5
    grad = np.array([(objective(x + eps * e, items, user, w, 3.0, every_record)
                      - objective(x - eps * e, items, user, w, 3.0, every_record)) / (2 * eps) for e in np.eye(4)])
    assert np.abs(grad).max() < 1e-4  # a stationary point of a concave objective: its maximum
    rng = np.random.default_rng(2)
    assert all(objective(x + 0.05 * rng.normal(size=4), items, user, w, 3.0, every_record) < f for _ in range(20))


def test_the_fit_finds_a_users_factor_from_its_records_and_ranks_its_items_first() -> None:
    items = _items(n=200, dim=4)
    true = 6.0 * items.factors[7]
    user = _draw(items, true, 2000)
    x = fit(items, user, np.ones(2000), prior=100.0, every_record=True)
    assert x @ true / (np.linalg.norm(x) * np.linalg.norm(true)) > 0.98
    best = set(np.argsort(-ranking_scores(items, true, True))[:10].tolist())
    assert len(best & set(np.argsort(-ranking_scores(items, x, True))[:10].tolist())) >= 8


def test_a_user_without_records_is_ranked_by_popularity() -> None:
    items = _items()
    empty = UserRecords(np.zeros(0, np.int64), np.zeros(0))
    x = fit(items, empty, np.zeros(0), prior=3.0, every_record=True)
    assert not x.any()
    assert np.array_equal(np.argsort(-ranking_scores(items, x, True)), np.argsort(-items.bias))


def test_recency_weights_halve_every_half_life_back_from_the_newest() -> None:
    assert np.allclose(recency_weights(4, 2.0), [0.5 ** 1.5, 0.5, 0.5 ** 0.5, 1.0])


def test_a_planted_log_gets_a_ceiling_below_its_oracle_and_a_log_without_true_items_none() -> None:
    log = planted(InteractionSpec(events=20_000, users=300, items=200, seed=3))
    split = time_split(log)
    got = ceiling(log, split)
    assert set(got) == {"positives", "every record"}
    assert all(0.0 < m["recall"] <= 1.0 for m in got.values())
    bare = Interactions("toy", log.user, log.item, log.label, log.time, {}, {})
    assert ceiling(bare, time_split(bare)) is None


def test_targets_put_the_strongest_target_against_the_ceiling() -> None:
    m = {"recall_seen_users": 0.1}
    out = {"methods": {"popularity": {"recall": 0.08, **m}, "ALS (implicit, 32 factors)": {"recall": 0.10, **m}},
           "ceiling": {"positives": {"recall": 0.12}, "every record": {"recall": 0.16}},
           "streamrec": {"recall": 0.12, "predict_auc": 0.71, "items_in_index": 5, "items_checked": 5,
                         "recall_seen_users": 0.1},
           "holdout_users": 10, "holdout_users_seen": 5, "item_rate_auc": 0.7}
    t = targets(out)
    assert t["ceiling_recall"] == 0.16
    assert abs(t["streamrec_over_ceiling"] - 0.75) < 1e-9
    assert abs(t["strongest_target_over_ceiling"] - 1.15 * 0.10 / 0.16) < 1e-9
