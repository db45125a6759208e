"""bench/retrieval.py's targets: the issue's baselines (popularity, item-kNN, ALS, BPR) decide the
1.2x target; the strongest of every baseline, ours included, is named apart."""

from __future__ import annotations

from bench.retrieval import targets
from bench.retrieval_baselines import EVERY_RECORD, RECENT_NAME, TEMPORAL_MF_NAME


def test_targets_name_the_best_of_the_named_baselines_and_the_strongest_apart():
    m = {"recall_seen_users": 0.1}
    out = {"methods": {"popularity": {"recall": 0.08, **m}, RECENT_NAME: {"recall": 0.15, **m},
                       TEMPORAL_MF_NAME: {"recall": 0.12, **m}, TEMPORAL_MF_NAME + EVERY_RECORD: {"recall": 0.14, **m},
                       "ALS (implicit, 32 factors)" + EVERY_RECORD: {"recall": 0.09, **m},
                       "ALS (implicit, 32 factors)": {"recall": 0.10, **m}},
           "streamrec": {"recall": 0.125, "predict_auc": 0.71, "items_in_index": 5, "items_checked": 5,
                         "recall_seen_users": 0.1},
           "holdout_users": 10, "holdout_users_seen": 5, "item_rate_auc": 0.7}
    t = targets(out)
    assert t["best_baseline"] == "ALS (implicit, 32 factors)" and t["recall_target_met"]  # 1.25x the named best
    assert t["strongest_baseline"] == RECENT_NAME and abs(t["streamrec_over_strongest_baseline"] - 0.125 / 0.15) < 1e-9
    assert t["predict_auc_above_item_rate"] and t["every_item_in_index"]


def test_a_failed_run_leaves_only_the_baselines_targets():
    out = {"methods": {"popularity": {"recall": 0.08}}, "streamrec": {"failed": "timeout"},
           "holdout_users": 10, "holdout_users_seen": 5, "item_rate_auc": 0.7}
    assert set(targets(out)) == {"best_baseline", "best_baseline_recall", "strongest_baseline",
                                 "strongest_baseline_recall"}


def test_by_user_sends_each_users_events_to_one_partition_in_time_order():
    import numpy as np

    from bench.retrieval import by_user
    from bench.retrieval_data import Interactions

    rng = np.random.default_rng(0)
    n = 3000
    user = rng.zipf(1.5, n).clip(max=200).astype(np.int64)
    log = Interactions("t", user, np.arange(n, dtype=np.int64), np.ones(n, np.int8), np.sort(rng.integers(0, 10**6, n)),
                       {}, {})
    out, tail = by_user(log, 2)
    assert sorted(out.item.tolist()) == list(range(n))  # every event once
    head = n - tail
    assert tail < 0.05 * n
    for p in (0, 1):
        lines = np.arange(p, head, 2)
        assert (np.diff(out.time[lines]) >= 0).all()  # each partition's stream in time order
    part = {}
    for i in range(head):
        assert part.setdefault(int(out.user[i]), i % 2) == i % 2  # a user's events on one partition


def test_a_variant_sets_train_model_keys_and_merges_a_mapping_into_the_models():
    import argparse

    import pytest

    from bench.retrieval import streamrec_config, variant, with_model_keys
    from bench.retrieval_data import planted

    name, keys = variant('half2={"retrieval": {"history_half_life": 2}, "embedding_dim": 16}')
    assert name == "half2"
    config = streamrec_config(planted())
    config["train"]["model"]["retrieval"] = {"temperature": 0.1}
    out = with_model_keys(config, keys)
    assert out["train"]["model"]["retrieval"] == {"temperature": 0.1, "history_half_life": 2}
    assert out["train"]["model"]["embedding_dim"] == 16
    assert config["train"]["model"]["retrieval"] == {"temperature": 0.1}  # the config itself unchanged
    for bad in ("half2", "={}", "x=[1]", "x={not json"):
        with pytest.raises(argparse.ArgumentTypeError, match="--variant"):
            variant(bad)
