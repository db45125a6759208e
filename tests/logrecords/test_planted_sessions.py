"""The planted session log (logrecords.planted_sessions): in time order, a seed draws it again, a
session's clicks lean to its last ones (more so than with the recency term off), popularity trends
as planted, and the oracle's ranking beats all-time and recent popularity on the later likes."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from logrecords.planted_sessions import SessionSpec, planted_sessions

SMALL = {"events": 20_000, "users": 300, "items": 300, "seed": 3}


@pytest.fixture(scope="module")
def log():
    return planted_sessions(SessionSpec(**SMALL))


def _same_genre_in_sessions(log, gap_s: int) -> float:
    """Share of a user's consecutive clicks at most ``gap_s`` apart (a session's) that share a genre."""
    genre = np.array([log.item_attrs[int(i)]["genre"] for i in log.item])
    order = np.lexsort((log.time, log.user))
    u, t, g = log.user[order], log.time[order], genre[order]
    within = (u[1:] == u[:-1]) & (t[1:] - t[:-1] <= gap_s)
    assert within.mean() > 0.5  # most clicks continue a session
    return float((g[1:] == g[:-1])[within].mean())


def test_the_log_is_in_time_order_and_a_seed_draws_it_again(log) -> None:
    assert log.user.shape == log.item.shape == log.label.shape == log.time.shape == (20_000,)
    assert np.all(np.diff(log.time) > 0)
    again = planted_sessions(SessionSpec(**SMALL))
    for name in ("user", "item", "label", "time"):
        np.testing.assert_array_equal(getattr(again, name), getattr(log, name))
    assert not np.array_equal(planted_sessions(SessionSpec(**{**SMALL, "seed": 4})).item, log.item)
    assert set(log.user_attrs) == set(range(1, 301)) and set(log.item_attrs) == set(range(1, 301))
    assert 0.2 < log.label.mean() < 0.9


def test_a_sessions_next_click_leans_to_its_last_ones(log) -> None:
    spec = SessionSpec(**SMALL)
    with_recency = _same_genre_in_sessions(log, 3 * spec.click_gap_s)
    without = _same_genre_in_sessions(planted_sessions(SessionSpec(**SMALL, recency=0.0)), 3 * spec.click_gap_s)
    assert with_recency > without + 0.15, (with_recency, without)


def _log_change(log, half: int) -> np.ndarray:
    """Each item's log count in the second half of the log over its count in the first (+1 each)."""
    early, late = (np.bincount(part, minlength=301)[1:] + 1.0 for part in (log.item[:half], log.item[half:]))
    return np.log(late / early)


def test_popularity_trends_as_planted(log) -> None:
    spec = SessionSpec(**SMALL)
    half = log.user.shape[0] // 2
    change = _log_change(log, half)
    # the items' popularity moves both ways, far more than sampling noise at equal rates would
    assert change.std() > 0.5 * spec.trend
    flat_change = _log_change(planted_sessions(SessionSpec(**SMALL, trend=0.0)), half)
    assert change.std() > 1.5 * flat_change.std()


def test_the_oracle_ranks_the_later_likes_above_popularity(log) -> None:
    cut = int(0.9 * log.user.shape[0])
    seen: dict[int, set[int]] = {}
    for u, i in zip(log.user[:cut].tolist(), log.item[:cut].tolist(), strict=True):
        seen.setdefault(u, set()).add(i)
    truth: dict[int, set[int]] = {}
    for u, i, y in zip(log.user[cut:].tolist(), log.item[cut:].tolist(), log.label[cut:].tolist(), strict=True):
        if y and i not in seen.get(u, ()):
            truth.setdefault(u, set()).add(i)
    users = np.array(sorted(truth), np.int64)
    scores = log.oracle(users, float(np.median(log.time[cut:])))

    def recall(lists: dict[int, list[int]]) -> float:
        return float(np.mean([len(set(lists[u]) & truth[u]) / min(len(truth[u]), 10) for u in truth]))

    def top(ranked: list[int], u: int) -> list[int]:
        return [i for i in ranked if i not in seen.get(u, ())][:10]

    oracle = {u: top(log.item_ids[np.argsort(-scores[r])].tolist(), u) for r, u in enumerate(users.tolist())}
    liked = log.label[:cut] == 1
    popular = [i for i, _ in Counter(log.item[:cut][liked].tolist()).most_common()]
    recent = [i for i, _ in Counter(log.item[cut // 2:cut][liked[cut // 2:]].tolist()).most_common()]
    o = recall(oracle)
    assert o > 1.5 * recall({u: top(popular, u) for u in truth})
    assert o > 1.3 * recall({u: top(recent, u) for u in truth})
