"""The planted log, the time split and the streamrec config of bench/retrieval.py."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from bench.retrieval import streamrec_config
from bench.retrieval_data import DATASETS, load_dataset, oracle_lists, planted, time_split
from bench.retrieval_metrics import cut_excluding, score_lists
from logrecords.generator import InteractionSpec
from models.model_config import DRIFTING_USER_ID_OPTIMIZER


@pytest.fixture(scope="module")
def log():
    return planted(InteractionSpec(events=20_000, users=400, items=300, seed=3))


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


def test_the_session_log_is_a_data_set_with_an_oracle_above_recent_popularity():
    assert "planted_sessions" in DATASETS
    log = load_dataset("planted_sessions", events=20_000, seed=3)
    assert log.name == "planted_sessions" and np.all(np.diff(log.time) > 0)
    assert set(log.record(0)) == {"user_id", "age", "gender", "region", "item_id", "genre", "tags", "label",
                                  "timestamp"}
    split = time_split(log)
    recent = split.train.take(slice(len(split.train) // 2, None))
    ranked = [i for i, _ in Counter(recent.item[recent.label == 1].tolist()).most_common()]
    popular = {u: cut_excluding(ranked, split.seen.get(u, ()), 10) for u in split.truth}
    o = score_lists(oracle_lists(log, split), split.truth, catalogue=len(split.catalogue))["recall"]
    assert o > 1.3 * score_lists(popular, split.truth, catalogue=len(split.catalogue))["recall"]


def test_the_config_is_the_two_tower_defaults_with_the_users_history_and_own_optimizer(log):
    config = streamrec_config(log, seed=2)
    # the user id's rows on their own optimizer, the last 20 positives attention-pooled
    assert config["schema"].pop("history") == {"slot": "history", "length": 20}
    slots = config["train"]["model"]["slots"]
    assert slots.pop() == {"name": "history", "tower": "user", "pooling": "attention"}
    assert next(s for s in slots if s["name"] == "user_id")["optimizer"] == DRIFTING_USER_ID_OPTIMIZER
    assert {s["name"] for s in slots if s["tower"] == "user"} == {"user_id", "age", "gender", "region"}
    assert {s["name"] for s in slots if s["tower"] == "item"} == {"item_id", "genre", "tags"}
    assert next(s for s in slots if s["name"] == "tags")["pooling"] == "mean"  # a list field
    assert set(config["train"]["model"]) == {"type", "n_dense", "seed", "slots"}  # the rest: two_tower's defaults
    assert config["train"]["model"]["seed"] == 2
    assert config["up"] == {"shards": 2, "workers": 2, "commit_on_exit": False}


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


def test_the_ratings_example_is_the_benchmarks_config_on_movielens100k():
    import yaml

    from bench.retrieval_data import movielens100k

    example = yaml.safe_load((Path(__file__).resolve().parents[2] / "examples" / "two_tower_ratings.yaml").read_text())
    config = streamrec_config(movielens100k(1_000))
    assert example["schema"] == config["schema"] and example["train"] == config["train"]
    assert example["kafka"] == config["kafka"]
    assert {k: v for k, v in config["up"].items() if k != "commit_on_exit"} == example["up"]


@pytest.mark.parametrize("dataset", ["movielens100k", "movielens"])
def test_schema_infer_proposes_the_hand_edited_config_on_the_real_logs(tmp_path: Path, dataset: str) -> None:
    """`--config-from infer`'s config, unedited: on both real logs as the benchmark replays them, the very slots,
    hash kinds, towers, poolings, optimizers, event time and history of the hand-edited one, up to their order."""
    from bench.retrieval import inferred_config
    from bench.retrieval_data import load_dataset

    log = load_dataset(dataset, movielens_events=3_000)
    hand = streamrec_config(log)
    inferred, _ = inferred_config(log.write_jsonl(tmp_path / "train.jsonl"), hand)

    def by_name(slots: list[dict]) -> dict[str, dict]:
        return {s["name"]: s for s in slots}

    got, want = inferred["schema"], hand["schema"]
    assert by_name(got.pop("slots")) == by_name(want.pop("slots"))
    assert got == want
    model, hand_model = inferred["train"]["model"], dict(hand["train"]["model"])
    assert by_name(model.pop("slots")) == by_name(hand_model.pop("slots"))
    assert model == {k: v for k, v in hand_model.items() if k != "seed"}  # seed: the model's default, 0


def test_data_sets_load_by_name_and_an_unknown_name_is_refused() -> None:
    from bench.retrieval_data import load_dataset

    log = load_dataset("planted", events=500, seed=3)
    ref = planted(InteractionSpec(events=500, seed=3))
    assert len(log) == 500 and (log.item == ref.item).all() and (log.user == ref.user).all()
    with pytest.raises(ValueError, match="'ml-1m'"):
        load_dataset("ml-1m")


@pytest.mark.parametrize(("suffix", "unit"), [(".csv", "iso8601"), (".parquet", "ms"), (".jsonl", "s")])
def test_schema_infer_reads_the_real_log_as_csv_and_parquet_with_its_times_in_any_form(
        tmp_path: Path, suffix: str, unit: str) -> None:
    """MovieLens 100K's records as CSV with ISO-8601 times and as Parquet with millisecond times: the proposal's
    towers and history are the hand-edited config's, and its parser reads the very seconds of the log."""
    import csv
    from datetime import UTC, datetime

    import pyarrow as pa
    import pyarrow.parquet as pq

    from bench.retrieval_data import movielens100k
    from cli.commands.schema import check_yaml, render_yaml
    from logrecords.file_formats import FileReader
    from logrecords.schema_inference import infer_schema

    log = movielens100k(2_000)
    recs = list(log.records())
    for r in recs:
        t = r["timestamp"]
        r["timestamp"] = (datetime.fromtimestamp(t, UTC).isoformat().replace("+00:00", "Z") if unit == "iso8601"
                          else t * 1000 if unit == "ms" else t)
    path = tmp_path / f"train{suffix}"
    if suffix == ".csv":
        with open(path, "w", newline="") as f:
            w = csv.writer(f, lineterminator="\n")
            w.writerow(list(recs[0]))
            w.writerows([["|".join(v) if isinstance(v, list) else v for v in r.values()] for r in recs])
    elif suffix == ".parquet":
        pq.write_table(pa.table({k: [r[k] for r in recs] for k in recs[0]}), path)
    else:
        log.write_jsonl(path)
    inference = infer_schema(path, user="user_id", item="item_id")
    check_yaml(render_yaml(inference, command="test"), source="test")
    schema = inference.schema()
    assert (schema.event_time, schema.event_time_unit) == ("timestamp", unit)
    hand = streamrec_config(log)
    towers = {s["name"]: s["tower"] for s in hand["train"]["model"]["slots"] if s["name"] != "history"}
    if suffix == ".csv":  # CSV text has no string type: a year of 66 distinct numbers reads as a dense field
        from models.dense_inputs import dense_warnings

        assert schema.dense_names == ["year"]
        del towers["year"]
        # standardized, as inference proposes for it, the year is no longer a flat log1p magnitude
        [year] = [s for s in schema.slots if s.name == "year"]
        assert year.transform.kind == "standardize" and 1900 < year.transform.mean < 2000
        assert dense_warnings(schema, dense_log1p=True, path=path) == []
    assert {f.name: f.tower for f in inference.fields if f.role == "sparse"} == towers
    assert {s.name: s.separator for s in schema.sparse_slots}["genres"] == ("|" if suffix == ".csv" else None)
    times = np.concatenate([b.parse()[0].event_time for b in FileReader(schema).blocks(path, 500)])
    np.testing.assert_array_equal(times, log.time.astype(np.float64))
