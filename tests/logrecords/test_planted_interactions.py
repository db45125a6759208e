"""The planted interaction log (logrecords.generator.planted_interactions): in time order, a fixed
seed draws the same log, popular items are picked more, every user and item carries its attributes,
the true item factors are unit rows, and the oracle's ranking beats popularity on the later events."""

from __future__ import annotations

import numpy as np
import pytest

from logrecords.generator import InteractionSpec, planted_interactions


@pytest.fixture(scope="module")
def log():
    return planted_interactions(InteractionSpec(events=20_000, users=400, items=300, seed=3))


def test_the_log_is_in_time_order_and_a_seed_draws_it_again(log) -> None:
    assert log.user.shape == log.item.shape == log.label.shape == log.time.shape == (20_000,)
    assert np.all(np.diff(log.time) > 0)
    again = planted_interactions(InteractionSpec(events=20_000, users=400, items=300, seed=3))
    for name in ("user", "item", "label", "time"):
        np.testing.assert_array_equal(getattr(again, name), getattr(log, name))
    other = planted_interactions(InteractionSpec(events=20_000, users=400, items=300, seed=4))
    assert not np.array_equal(other.item, log.item)


def test_ids_attributes_and_true_factors(log) -> None:
    assert log.user.min() >= 1 and log.user.max() <= 400 and log.item.min() >= 1 and log.item.max() <= 300
    assert set(log.user_attrs) == set(range(1, 401)) and set(log.item_attrs) == set(range(1, 301))
    assert all(set(a) == set(log.USER_FIELDS) for a in log.user_attrs.values())
    assert all(set(a) == set(log.ITEM_FIELDS) and len(a["tags"]) == 2 for a in log.item_attrs.values())
    assert log.item_factors.shape == (300, 16) and log.item_bias.shape == (300,)
    np.testing.assert_allclose(np.linalg.norm(log.item_factors, axis=1), 1.0)
    counts = np.sort(np.bincount(log.item, minlength=301)[1:])[::-1]
    assert counts[0] > 5 * counts[150]  # popularity skew
    assert 0.2 < log.label.mean() < 0.9


def test_the_oracle_ranks_the_later_likes_above_popularity(log) -> None:
    cut = 18_000
    later = slice(cut, None)
    liked = log.label[later] == 1
    users, items = log.user[later][liked], log.item[later][liked]
    popular = np.bincount(log.item[:cut][log.label[:cut] == 1], minlength=301)[1:]
    scores = log.oracle(users, float(np.median(log.time[later])))
    assert scores.shape == (users.shape[0], 300)

    def hits(s: np.ndarray) -> float:  # the liked item among each event's top 10
        top = np.argsort(-s, axis=1)[:, :10] + 1
        return float(np.mean((top == items[:, None]).any(axis=1)))

    assert hits(scores) > 1.5 * hits(np.tile(popular, (users.shape[0], 1)).astype(np.float64))
