"""bench/retrieval_metrics.py against hand-computed values."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bench.retrieval_metrics import auc, best_shared_list, cut_excluding, score_lists, user_scores


def test_one_user_by_hand():
    # k=3: [1, 2, 3] holds 2 of {2, 5} at rank 2 -> recall 1/2, hit, DCG 1/log2(3), ideal 1 + 1/log2(3)
    recall, hit, ndcg = user_scores([1, 2, 3, 4], {2, 5}, k=3)
    assert recall == 0.5 and hit == 1.0
    assert ndcg == pytest.approx((1 / math.log2(3)) / (1 + 1 / math.log2(3)))


def test_ideal_dcg_caps_at_k():
    # 5 relevant, k=2, both hits: the ideal has 2 hits, so NDCG is 1 while recall is 2/5
    recall, hit, ndcg = user_scores([1, 2], {1, 2, 3, 4, 5}, k=2)
    assert (recall, hit, ndcg) == (pytest.approx(0.4), 1.0, pytest.approx(1.0))


def test_means_coverage_and_missing_lists():
    lists = {1: [1, 2, 3, 4], 2: [7, 8]}  # user 3 has no list: scores 0
    truth = {1: {2, 5}, 2: {9}, 3: {1}}
    got = score_lists(lists, truth, catalogue=10, k=3)
    ndcg1 = (1 / math.log2(3)) / (1 + 1 / math.log2(3))
    assert got["users"] == 3
    assert got["recall"] == pytest.approx(0.5 / 3)
    assert got["hit_rate"] == pytest.approx(1 / 3)
    assert got["ndcg"] == pytest.approx(ndcg1 / 3)
    assert got["coverage"] == pytest.approx(5 / 10)  # {1, 2, 3, 7, 8}: item 4 is past k
    seen = score_lists(lists, truth, catalogue=10, k=3, subset=[2, 3, 99])
    assert seen["users"] == 2 and seen["recall"] == 0.0


def test_lists_longer_than_k_are_cut():
    # a list of N + len(F) ids (implicit's item-kNN with filter_items) must not score past k
    assert user_scores([1, 2, 3, 9], {9}, k=3) == (0.0, 0.0, 0.0)


def test_cut_excluding():
    assert cut_excluding([5, -1, 3, 5, 4, 2, 1], exclude=[3], n=3) == [5, 4, 2]
    assert cut_excluding(np.array([1, 2]), exclude=set(), n=5) == [1, 2]


def test_auc_by_hand_with_ties():
    # pairs (pos, neg): (0.9, 0.1) 1, (0.9, 0.4) 1, (0.4, 0.1) 1, (0.4, 0.4) 1/2
    assert auc(np.array([1, 0, 1, 0]), np.array([0.9, 0.1, 0.4, 0.4])) == pytest.approx(3.5 / 4)
    assert math.isnan(auc(np.array([1, 1]), np.array([0.1, 0.2])))


def test_best_shared_list_by_hand():
    # user 1 likes {1, 2} (1/2 each), user 2 likes {2} (1): item 2 weighs 1.5, item 1 0.5; item 3 is
    # nobody's; item 9 is liked but not a candidate (never in train); user 3 has nothing relevant
    truth = {1: {1, 2}, 2: {2}, 3: set(), 4: {9}}
    top, recall = best_shared_list(truth, [1, 2, 3, 4], candidates=[1, 2, 3], k=1)
    assert top == [2] and recall == pytest.approx(1.5 / 3)
    assert score_lists({u: top for u in (1, 2, 4)}, {u: truth[u] for u in (1, 2, 4)}, catalogue=3, k=1)["recall"] \
        == pytest.approx(recall)


def test_no_shared_list_beats_the_best_one():
    rng = np.random.default_rng(0)
    truth = {u: {int(i) for i in rng.choice(30, size=rng.integers(1, 12), replace=False)} for u in range(40)}
    top, bound = best_shared_list(truth, truth, candidates=range(30), k=5)
    assert score_lists({u: top for u in truth}, truth, catalogue=30, k=5)["recall"] == pytest.approx(bound)
    for _ in range(300):
        other = [int(i) for i in rng.choice(30, size=5, replace=False)]
        assert score_lists({u: other for u in truth}, truth, catalogue=30, k=5)["recall"] <= bound + 1e-12
