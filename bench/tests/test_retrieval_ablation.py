"""bench/retrieval_ablation.py: the re-rank by a popularity prior, its tuning, the predict prior."""

from __future__ import annotations

import numpy as np

from bench.retrieval_ablation import Prior, log_prior, reranked, tune_predict
from bench.retrieval_data import Interactions, time_split


def _split():
    # item 1: 6 positives early; item 2: 3 positives late; item 3: 5 late negatives (one of user 9, seen in
    # train); users 9 and 7 (new) held out
    item = np.array([1] * 6 + [2] * 3 + [3] * 5 + [2, 1, 2, 1])
    label = np.array([1] * 9 + [0] * 5 + [1, 1, 1, 1], np.int8)
    user = np.array([5] * 9 + [9] + [5] * 4 + [9, 9, 7, 7])
    return time_split(Interactions("toy", user, item, label, np.arange(18), {}, {}), 4 / 18)


def test_log_prior_is_log1p_of_the_decayed_positives():
    split = _split()
    of = log_prior(split, None, every=False)
    assert np.allclose(of(np.array([1, 2, 3, 99])), np.log1p([6, 3, 0, 0]))


def _slow_rerank(ids, scores, counts, weight, temperature, k):
    z = {i: s / temperature + weight * float(np.log1p(counts.get(i, 0))) for i, s in zip(ids, scores, strict=True)}
    return sorted(ids, key=lambda i: -z[i])[:k]


def test_rerank_adds_the_weighted_prior_to_the_logits_and_inf_gives_the_trending_list():
    split = _split()
    ids, scores = np.array([3, 2, 1]), np.array([0.30, 0.20, 0.10])
    scored = {9: (ids, scores), 7: (ids, scores)}
    assert reranked(scored, split, Prior(None, False, 0.0, 0.0), 0.05, 2) == {9: [3, 2], 7: [3, 2]}
    # logits 6, 4, 2 (items 3, 2, 1) plus 2 * log1p(0, 3, 6): 6, 6.77, 5.89
    slow = _slow_rerank(ids.tolist(), scores.tolist(), {1: 6, 2: 3}, 2.0, 0.05, 2)
    got = reranked(scored, split, Prior(None, False, 2.0, 2.0), 0.05, 2)
    assert got == {9: slow, 7: slow} and slow == [2, 3]
    # user 7 is new (no train event), user 9 seen: at weight inf the decayed list itself, item 2's late positives first
    got = reranked(scored, split, Prior(0.1, False, 0.0, float("inf")), 0.05, 2)
    assert got[7] == [2, 1] and got[9] == [3, 2]


def test_the_predict_prior_weight_is_the_one_with_the_best_auc():
    labels = np.array([1, 0, 1, 0, 1, 0])
    model = np.full(6, 0.5)  # no information: the item rate alone decides
    rate = np.array([0.9, 0.1, 0.8, 0.2, 0.7, 0.3])
    assert tune_predict(labels, model, rate) > 0.0
    assert tune_predict(labels, rate, 1.0 - rate) == 0.0  # a prior against the labels is never chosen


def test_tuning_picks_a_prior_that_lifts_recall_and_keeps_the_grid():
    from bench.retrieval_ablation import HALF_LIVES, tune_prior

    split = _split()  # both holdout users like items 1 and 2; the served lists put item 3 first
    ids, scores = np.array([3, 2, 1]), np.array([0.30, 0.20, 0.10])
    prior, recall, grid = tune_prior({9: (ids, scores), 7: (ids, scores)}, split, 0.05, 1)
    assert recall == 0.5 and prior.weight_seen > 0 and prior.weight_new > 0
    assert len(grid) == 2 * len(HALF_LIVES) and max(g["recall"] for g in grid) == recall
