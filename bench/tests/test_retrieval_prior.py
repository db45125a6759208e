"""bench/retrieval_prior.py: the service's popularity prior replayed on model-alone lists (the service's counts by
event time, its re-rank for users with a history), its half-life and weight chosen on a split, and the config that
serves the choice."""

from __future__ import annotations

import math

import numpy as np

from bench.retrieval_data import Interactions, time_split
from bench.retrieval_prior import DAY_S, HALF_LIVES_DAYS, ServedPrior, event_time_counts, served_lists, tune

HOUR = 3600


def _split():
    # item 1: 6 records early; item 2: 3 records late; item 3: 5 late records labelled 0 (user 9's first: 9 has a
    # record but no positive in train); users 9 and 7 (new) held out, both like items 1 and 2
    item = np.array([1] * 6 + [2] * 3 + [3] * 5 + [2, 1, 2, 1])
    label = np.array([1] * 9 + [0] * 5 + [1, 1, 1, 1], np.int8)
    user = np.array([5] * 9 + [9] + [5] * 4 + [9, 9, 7, 7])
    return time_split(Interactions("toy", user, item, label, np.arange(18) * HOUR, {}, {}), 4 / 18)


def test_the_counts_are_every_record_decayed_by_event_time_from_the_newest():
    split = _split()
    counts = event_time_counts(split, 2 * HOUR)
    newest = 13 * HOUR
    slow: dict[int, float] = {}
    for i, t in zip(split.train.item.tolist(), split.train.time.tolist(), strict=True):
        slow[i] = slow.get(i, 0.0) + 0.5 ** ((newest - t) / (2 * HOUR))
    assert counts.as_of == newest and counts.ids.tolist() == [1, 2, 3]
    np.testing.assert_allclose(counts.log_counts, [math.log1p(slow[i]) for i in (1, 2, 3)], rtol=1e-6)


def test_only_users_with_a_train_positive_are_reranked_and_by_the_services_rule():
    split = _split()
    ids, scores = np.array([3, 2, 1]), np.array([0.30, 0.20, 0.10])
    scored = {9: (ids, scores), 5: (ids, scores), 7: (ids, scores)}
    prior = ServedPrior("logit", 1.0 / 24, 2.0)  # an hour: item 3's late records outweigh the rest
    got = served_lists(scored, split, prior, 0.05, 3)
    assert got[9] == [3, 2, 1] and got[7] == [3, 2, 1]  # 9: no positive, 7: new; the model's order
    counts = dict(zip([1, 2, 3], np.expm1(event_time_counts(split, HOUR).log_counts).tolist(), strict=True))
    slow = sorted([3, 2, 1], key=lambda i: -(dict(zip([3, 2, 1], scores, strict=True))[i] / 0.05
                                             + 2.0 * math.log1p(counts[i])))
    assert got[5] == slow
    assert served_lists(scored, split, ServedPrior("logit", 1.0, 0.0), 0.05, 3)[5] == [3, 2, 1]  # weight 0


def test_tuning_picks_a_half_life_and_weight_that_lift_recall_and_keeps_the_grid():
    split = _split()
    # user 5 (a history) likes item 1, which the model ranks a hair below item 3; over a long half-life item 1's 6
    # records outweigh item 3's 5 later ones
    split.truth.clear()
    split.truth[5] = {1}
    ids, scores = np.array([3, 1, 2]), np.array([0.30, 0.299, 0.10])
    chosen, recall, grid = tune({5: (ids, scores)}, split, 0.05, 1, "standardized")
    assert recall == 1.0 and chosen.weight > 0 and chosen.scale == "standardized"
    assert [g["half_life_days"] for g in grid] == list(HALF_LIVES_DAYS)
    assert served_lists({5: (ids, scores)}, split, chosen, 0.05, 1)[5] == [1]


def test_the_config_serves_the_chosen_prior():
    from bench.retrieval import served_prior, streamrec_config, with_served_prior

    split = _split()
    config = streamrec_config(split.train)
    assert with_served_prior(config) is config
    got = served_prior(with_served_prior(config, ServedPrior("standardized", 3.0, 0.75)))
    assert got == {"half_life_days": 3.0, "scale": "standardized", "weight": 0.75, "candidates": 300}
    assert served_prior(config)["half_life_days"] * DAY_S == 5 * DAY_S


def test_the_ablation_rows_carry_each_scales_choice_and_the_config_defaults():
    from bench.retrieval import metrics
    from bench.retrieval_ablation import rows
    from bench.retrieval_ablation import tune as tune_all

    split = _split()
    ids, scores = np.array([3, 1, 2]), np.array([0.30, 0.299, 0.10])
    scored = {u: (ids, scores) for u in (5, 9, 7)}
    predict = np.full(len(split.test), 0.5)
    defaults = ServedPrior("standardized", 5.0, 3.0, 1000)
    tuned = tune_all(scored, split, 0.05, 2, predict, np.full(len(split.test), 0.5), defaults)
    assert [p.scale for p in tuned.served] == ["standardized", "logit"] and tuned.defaults == defaults
    got = rows(scored, split, tuned, 0.05, 2, predict, np.full(len(split.test), 0.5), metrics)
    row = got["+ service's prior, the config's defaults"]
    assert row["prior"]["weight"] == 3.0
    want = served_lists(scored, split, defaults, 0.05, 2)
    assert row["recall"] == metrics(want, split)["recall"]
