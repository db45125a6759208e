"""The planted log, the time split and the arms' configs of bench/retrieval.py."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from bench.retrieval_arms import ARMS, USER_ID_RMS, Arm, arm_config, base_config
from bench.retrieval_data import PlantedSpec, oracle_lists, planted, time_split
from bench.retrieval_metrics import cut_excluding, score_lists


@pytest.fixture(scope="module")
def log():
    return planted(PlantedSpec(events=20_000, users=400, items=300, seed=3))


def test_planted_log_is_in_time_order_with_attributes(log):
    assert len(log) == 20_000 and np.all(np.diff(log.time) > 0)
    rec = log.record(0)
    assert set(rec) == {"user_id", "age", "gender", "region", "item_id", "genre", "tags", "label", "timestamp"}
    assert isinstance(rec["tags"], list) and rec["label"] in (0, 1)
    counts = Counter(log.item.tolist()).most_common()
    assert counts[0][1] > 5 * counts[len(counts) // 2][1]  # popularity skew
    assert 0.2 < log.label.mean() < 0.9


def test_time_split_holds_out_the_last_tenth(log):
    split = time_split(log)
    assert len(split.test) == 2_000 and split.train.time.max() < split.test.time.min()
    for user, items in split.truth.items():
        assert items and not items & split.seen.get(user, set())  # train items are never relevant
        test_pos = set(split.test.item[(split.test.user == user) & (split.test.label == 1)].tolist())
        assert items <= test_pos


def test_oracle_beats_popularity(log):
    split = time_split(log)
    pop = [i for i, _ in Counter(split.train.item[split.train.label == 1].tolist()).most_common()]
    popular = {u: cut_excluding(pop, split.seen.get(u, ()), 10) for u in split.truth}
    oracle = oracle_lists(log, split)
    assert all(not set(oracle[u]) & split.seen.get(u, set()) for u in oracle)
    o = score_lists(oracle, split.truth, catalogue=len(split.catalogue))["recall"]
    p = score_lists(popular, split.truth, catalogue=len(split.catalogue))["recall"]
    assert o > 1.5 * p


def test_arms_are_model_variations_or_not_available(log):
    base = base_config(log)
    config, why = arm_config(base, Arm("plain"))  # no overrides: the base as it is
    assert why == "" and config == base
    # default: the base, the user id's rows on their own optimizer, the last 20 positives attention-pooled
    config, why = arm_config(base, ARMS[0])
    assert why == "" and ARMS[0].name == "default"
    assert config["schema"].pop("history") == {"slot": "history", "length": 20}
    slots = config["train"]["model"]["slots"]
    assert slots.pop() == {"name": "history", "tower": "user", "pooling": "attention"}
    user_id = next(s for s in slots if s["name"] == "user_id")
    assert user_id.pop("optimizer") == USER_ID_RMS
    assert config == base
    assert {s["name"] for s in base["train"]["model"]["slots"] if s["tower"] == "user"} == {
        "user_id", "age", "gender", "region"}
    config, why = arm_config(base, Arm("nope", {"no_such_option": 1}))
    assert config is None and "no_such_option" in why
    for arm in ARMS:
        config, _ = arm_config(base, arm)
        if config is None:
            continue
        # an arm changes train.model, a history arm the schema's history, and a job arm what it names (nothing else)
        schema = dict(config["schema"])
        schema.pop("history", None)
        assert schema == base["schema"]
        assert arm.history == ("history" in config["schema"])
        for key in ("kafka", "up"):
            assert config[key] == {**base[key], **arm.job.get(key, {})}
        changed = {k for k, v in config["train"].items() if v != base["train"].get(k)}
        assert changed <= {"model", *arm.job.get("train", {})}


def test_movielens100k_is_the_ratings_with_user_and_movie_attributes():
    from bench.retrieval_data import movielens100k  # recbole's data files: make installs the wheel --no-deps

    log = movielens100k()
    assert len(log) == 100_000 and np.all(np.diff(log.time) >= 0)
    assert len(np.unique(log.user)) == 943 and len(np.unique(log.item)) == 1682
    assert log.user_fields == ("age", "gender", "occupation", "zip") and log.item_fields == ("genres", "year")
    assert 0.5 < log.label.mean() < 0.6  # rating >= 4
    rec = log.record(0)
    assert set(rec) == {"user_id", "age", "gender", "occupation", "zip", "item_id", "genres", "year", "label",
                        "timestamp"}
    assert rec["gender"] in ("M", "F") and rec["age"].endswith("0s") and isinstance(rec["genres"], list)
    assert log.item_attrs[1]["genres"] == ["Animation", "Children's", "Comedy"]  # Toy Story
    split = time_split(log)
    assert len(split.test) == 10_000 and split.train.time.max() <= split.test.time.min()
    assert len(movielens100k(5_000)) == 5_000


def test_the_ratings_example_is_the_default_arm_on_movielens100k():
    import yaml

    from bench.retrieval_data import movielens100k

    example = yaml.safe_load((Path(__file__).resolve().parents[2] / "examples" / "two_tower_ratings.yaml").read_text())
    config, why = arm_config(base_config(movielens100k(1_000)), ARMS[0])
    assert why == "" and config is not None
    assert example["schema"] == config["schema"] and example["train"] == config["train"]
    assert example["kafka"] == config["kafka"]
    assert {k: v for k, v in config["up"].items() if k != "commit_on_exit"} == example["up"]


def test_data_sets_load_by_name_and_an_unknown_name_is_refused() -> None:
    from bench.retrieval_data import load_dataset

    log = load_dataset("planted", events=500, seed=3)
    ref = planted(PlantedSpec(events=500, seed=3))
    assert len(log) == 500 and (log.item == ref.item).all() and (log.user == ref.user).all()
    with pytest.raises(ValueError, match="'ml-1m'"):
        load_dataset("ml-1m")
