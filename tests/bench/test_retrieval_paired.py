"""bench/retrieval_paired.py and bench/retrieval.py's pairing of arm runs against the default's."""

from __future__ import annotations

import numpy as np
import pytest

from bench.retrieval import paired_against_default
from bench.retrieval_data import Interactions, Split
from bench.retrieval_metrics import score_lists
from bench.retrieval_paired import paired_difference, per_user_recall


def test_per_user_recall_matches_the_mean_and_scores_missing_lists_zero():
    lists = {1: [1, 2, 3, 4], 2: [7, 8]}
    truth = {1: {2, 5}, 2: {9}, 3: {1}}
    got = per_user_recall(lists, truth, k=3)
    assert got == {"1": 0.5, "2": 0.0, "3": 0.0}
    assert np.mean(list(got.values())) == pytest.approx(score_lists(lists, truth, catalogue=10, k=3)["recall"])


def test_identical_runs_differ_by_zero():
    run = {"1": 0.5, "2": 0.0, "3": 1.0}
    d = paired_difference([run, run], [dict(run), dict(run)])
    assert (d["runs"], d["users"], d["diff"], d["low"], d["high"], d["better"], d["worse"]) == (2, 3, 0, 0, 0, 0, 0)


def test_runs_pair_by_position_and_users_subset():
    ref = [{"1": 0.0, "2": 0.5}, {"1": 1.0, "2": 0.5}]
    arm = [{"1": 1.0, "2": 0.5}, {"1": 1.0, "2": 0.0}]  # user 1: +1 then 0; user 2: 0 then -0.5
    d = paired_difference(arm, ref)
    assert d["diff"] == pytest.approx((0.5 - 0.25) / 2)
    assert (d["better"], d["worse"]) == (1, 1)
    assert d["low"] <= d["diff"] <= d["high"]
    only1 = paired_difference(arm, ref, users=[1])
    assert (only1["users"], only1["diff"], only1["low"], only1["high"]) == (1, 0.5, 0.5, 0.5)
    assert paired_difference(arm[:1], ref)["runs"] == 1  # the shorter list decides


def _split() -> Split:
    none = np.zeros(0, np.int64)
    log = Interactions("t", none, none, none.astype(np.int8), none, {}, {})
    return Split(log, log, {1: {5}, 2: {6}}, {1: {3}}, np.array([3, 5, 6]))


def test_bench_pairs_each_arm_with_the_default_run_by_run_skipping_failed_runs():
    split = _split()
    ref = [{"per_user_recall": {"1": 0.0, "2": 1.0}}, {"failed": "timeout"}, {"per_user_recall": {"1": 0.0, "2": 0.0}}]
    arm = [{"per_user_recall": {"1": 1.0, "2": 1.0}}, {"per_user_recall": {"1": 0.0, "2": 0.0}},
           {"per_user_recall": {"1": 1.0, "2": 0.0}}]
    got = paired_against_default({"default": ref, "x": arm}, split)
    assert set(got) == {"x"}
    assert got["x"]["all"]["runs"] == 2 and got["x"]["all"]["diff"] == pytest.approx(0.5)
    assert got["x"]["seen"]["users"] == 1 and got["x"]["seen"]["diff"] == pytest.approx(1.0)


def test_targets_name_the_issues_best_baseline_and_the_strongest_apart():
    from bench.retrieval import targets
    from bench.retrieval_baselines import EVERY_RECORD, RECENT_NAME, TEMPORAL_MF_NAME

    m = {"recall_seen_users": 0.1}
    out = {"methods": {"popularity": {"recall": 0.08, **m}, RECENT_NAME: {"recall": 0.15, **m},
                       TEMPORAL_MF_NAME: {"recall": 0.12, **m}, TEMPORAL_MF_NAME + EVERY_RECORD: {"recall": 0.14, **m},
                       "ALS (implicit, 32 factors)" + EVERY_RECORD: {"recall": 0.09, **m},
                       "ALS (implicit, 32 factors)": {"recall": 0.10, **m}},
           "arms": {"default": {"recall": 0.125, "predict_auc": 0.71, "items_in_index": 5, "items_checked": 5,
                                "recall_seen_users": 0.1}},
           "holdout_users": 10, "holdout_users_seen": 5, "item_rate_auc": 0.7}
    t = targets(out)
    assert t["best_baseline"] == "ALS (implicit, 32 factors)" and t["recall_target_met"]  # 1.25x the issue's best
    assert t["strongest_baseline"] == RECENT_NAME and abs(t["streamrec_over_strongest_baseline"] - 0.125 / 0.15) < 1e-9
