"""The popularity prior's weight a bundle carries (trainer.prior_weight): the grid weight whose replay of the
service's re-rank holds the most users' next pick in their top k, as a slow one-user-at-a-time reference
finds it; 0 where the counts say nothing of what users pick, above 0 where they pick what is popular now."""

from __future__ import annotations

import numpy as np
import pytest

from logrecords.batch import Batch
from trainer.prior_weight import WEIGHTS, RecentPositives, choose_weight, newest_per_user, with_own_item

K = 5


def _world(seed: int, users: int = 60, items: int = 80, dim: int = 6):
    rng = np.random.default_rng(seed)
    ids = np.sort(rng.choice(np.arange(1, 10_000, dtype=np.uint64), items, replace=False))
    return rng, ids, rng.standard_normal((users, dim)).astype(np.float32), rng.standard_normal(
        (items, dim)).astype(np.float32)


def _ragged(rows: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    offsets = np.zeros(len(rows) + 1, np.int64)
    offsets[1:] = np.cumsum([len(r) for r in rows])
    return np.array([v for r in rows for v in r], np.uint64), offsets


def _reference(users, targets, excluded, ids, vectors, counts, candidates) -> float:
    """The best grid weight found the slow way: one user at a time, a dict of counts, Python sorting."""
    count = dict(zip(counts[0].tolist(), counts[1].tolist(), strict=True))
    values, offsets = excluded
    hits = dict.fromkeys(WEIGHTS, 0)
    for u in range(users.shape[0]):
        skip = set(values[offsets[u]:offsets[u + 1]].tolist())
        scored = sorted(((float(users[u] @ vectors[j]), int(ids[j])) for j in range(ids.shape[0])
                         if int(ids[j]) not in skip), key=lambda p: -p[0])
        top = scored[:candidates]
        s = np.array([p[0] for p in top])
        c = np.log1p(np.array([count.get(p[1], 0.0) for p in top]))
        for w in WEIGHTS:
            z = (s - s.mean()) / s.std() + w * ((c - c.mean()) / c.std() if c.std() > 0 else 0.0)
            best = sorted(range(len(top)), key=lambda i: -z[i])[:K]
            hits[w] += int(targets[u]) in {top[i][1] for i in best}
    most = max(hits.values())
    return min(w for w in WEIGHTS if hits[w] == most)


@pytest.mark.parametrize("seed", range(4))
def test_the_choice_is_the_slow_references_argmax(seed: int) -> None:
    rng, ids, users, vectors = _world(seed)
    counts = (ids, rng.exponential(5.0, ids.shape[0]) ** 2, 0.0)
    # targets partly what the model ranks high, partly what is popular: neither weight wins by construction
    scores = users @ vectors.T
    popular = ids[np.argsort(-counts[1])[:8]]
    targets = np.where(rng.random(users.shape[0]) < 0.5, ids[np.argmax(scores, axis=1)],
                       rng.choice(popular, users.shape[0]))
    excluded = _ragged([rng.choice(ids, int(rng.integers(0, 4)), replace=False).tolist() for _ in users])
    for candidates in (30, 1000):  # fewer than the items, and more than there are
        got = choose_weight(users, targets, excluded, ids, vectors, counts, candidates=candidates, k=K)
        assert got is not None
        assert got.weight == _reference(users, targets, excluded, ids, vectors, counts, candidates)
        assert got.hit_rates[got.weight] == max(got.hit_rates.values())
        assert got.candidates == min(candidates, ids.shape[0] - max(np.diff(excluded[1])))


def test_counts_that_say_nothing_of_the_picks_get_weight_0() -> None:
    rng, ids, users, vectors = _world(7)
    targets = ids[np.argmax(users @ vectors.T, axis=1)]  # users pick what the model ranks first
    counts = (ids, rng.exponential(5.0, ids.shape[0]) ** 2, 0.0)  # popularity unrelated to the picks
    got = choose_weight(users, targets, _ragged([[] for _ in users]), ids, vectors, counts, k=K)
    assert got is not None and got.weight == 0.0
    assert got.hit_rates[0.0] == 1.0 and min(got.hit_rates.values()) < 1.0


def test_a_trending_log_gets_a_weight_above_0() -> None:
    rng, ids, users, vectors = _world(8)
    counts = (ids, rng.exponential(5.0, ids.shape[0]) ** 2, 0.0)
    trending = ids[np.argsort(-counts[1])[:3]]  # users pick among what is popular now, whatever the model says
    targets = rng.choice(trending, users.shape[0])
    got = choose_weight(users, targets, _ragged([[] for _ in users]), ids, vectors, counts, k=K)
    assert got is not None and got.weight > 0.0
    assert got.hit_rates[got.weight] > got.hit_rates[0.0]
    assert got.manifest()["weight"] == got.weight and got.manifest()["scale"] == "standardized"


def test_no_users_or_no_items_choose_nothing() -> None:
    _, ids, users, vectors = _world(9)
    counts = (ids, np.ones(ids.shape[0]), 0.0)
    empty = _ragged([])
    assert choose_weight(users[:0], ids[:0], empty, ids, vectors, counts) is None
    assert choose_weight(users, ids[: users.shape[0]], _ragged([[] for _ in users]), ids[:0], vectors[:0],
                         counts) is None


def _batch(users: list[int], items: list[int], labels: list[float], history: list[list[int]]) -> Batch:
    n = len(users)
    one = np.arange(n + 1, dtype=np.int64)
    values, offsets = _ragged(history)
    u, i = np.array(users, np.uint64), np.array(items, np.uint64)
    return Batch(labels=np.array(labels, np.float32), dense=np.zeros((n, 0), np.float32),
                 slots={"user": (u, one), "item": (i, one), "history": (values, offsets)},
                 event_time=np.arange(n, dtype=np.float64), user_id=u, item_id=i)


def test_the_remembered_records_are_the_newest_positives_with_a_history() -> None:
    recent = RecentPositives("history", capacity=4)
    assert recent.snapshot() is None
    recent.observe(_batch([1, 2, 3], [10, 11, 12], [1, 0, 1], [[7], [7], []]))  # 2: a negative, 3: no history
    recent.observe(_batch([4, 5, 6, 7], [13, 14, 15, 16], [1, 1, 1, 1], [[7], [7], [7], [7, 8]]))
    recent.observe(_batch([8], [17], [1], [[9]]))
    got = recent.snapshot()
    assert got is not None and got.batch.item_id.tolist() == [14, 15, 16, 17]  # the newest 4 of the 6 kept
    assert got.batch.slot_ids("history", 2).tolist() == [7, 8]
    assert got.end == 6 and got.since(5).tolist() == [3] and got.since(0).tolist() == [0, 1, 2, 3]
    assert RecentPositives(None).snapshot() is None


def test_each_sampled_user_is_replayed_on_its_newest_record() -> None:
    batch = _batch([1, 2, 1, 3, 2], [10, 11, 12, 13, 14], [1] * 5, [[7]] * 5)
    assert newest_per_user(batch, 10, seed=0).tolist() == [2, 3, 4]
    some = newest_per_user(batch, 2, seed=0)
    assert some.shape == (2,) and set(some.tolist()) <= {2, 3, 4}


def test_a_query_is_the_users_history_after_its_newest_record() -> None:
    batch = _batch([1, 2, 3], [10, 11, 12], [1, 1, 1], [[7, 6, 5], [], [9]])
    values, offsets = with_own_item(batch, "history", 3)
    rows = [values[offsets[i]:offsets[i + 1]].tolist() for i in range(3)]
    assert rows == [[10, 7, 6], [11], [12, 9]]  # newest first, at most the history's length


def test_several_picks_of_one_user_score_against_its_one_list() -> None:
    rng, ids, users, vectors = _world(10)
    counts = (ids, rng.exponential(5.0, ids.shape[0]) ** 2, 0.0)
    asked_by = rng.integers(0, users.shape[0], 150)
    targets = rng.choice(ids, 150)
    excluded = _ragged([rng.choice(ids, 2, replace=False).tolist() for _ in users])
    once = choose_weight(users, targets, excluded, ids, vectors, counts, asked_by=asked_by, k=K)
    values, offsets = excluded
    each = _ragged([values[offsets[u]:offsets[u + 1]].tolist() for u in asked_by])
    per_pick = choose_weight(users[asked_by], targets, each, ids, vectors, counts, k=K)
    assert once is not None and per_pick is not None
    assert once.hit_rates == per_pick.hit_rates and once.picks == 150
