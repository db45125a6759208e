"""`streamrec schema infer`: a ratings log as JSON lines, CSV or Parquet gives a YAML the config loader
accepts, with the slots, hash kinds, event time and towers a user would write; train-files trains on it."""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cli.main import main
from core.errors import ConfigError, InvalidInput
from launcher.system_config import load_config
from logrecords.schema_config import LabelRule
from logrecords.schema_inference import infer_schema

GENRES = ["Action", "Comedy", "Drama", "Horror", "Sci-Fi"]


def ratings(n: int = 1200, seed: int = 0) -> list[dict[str, Any]]:
    """A public-ratings-like log: integer ids, string attributes, a genre list, Unix time, no dense field
    except a price; studio and genres belong to the movie, device to the visit."""
    rng = random.Random(seed)
    movies = {m: (rng.choice(["A24", "Pixar", "Ghibli"]), rng.sample(GENRES, 2)) for m in range(60)}
    out = []
    for k in range(n):
        m = rng.randrange(60)
        studio, genres = movies[m]
        out.append({"user": rng.randint(1, 80), "movie_id": m, "click": int(rng.random() < 0.3), "studio": studio,
                    "genres": genres, "price": round(rng.uniform(1, 20), 2), "ts": 1_600_000_000 + 37 * k,
                    "device": rng.choice(["ios", "android", "web"]), "hour": rng.randrange(24)})
    return out


def write(path: Path, recs: list[dict[str, Any]]) -> Path:
    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    elif path.suffix == ".csv":
        with open(path, "w", newline="") as f:
            w = csv.writer(f, lineterminator="\n")
            w.writerow(list(recs[0]))
            w.writerows([[("|".join(v) if isinstance(v, list) else v) for v in r.values()] for r in recs])
    else:
        pq.write_table(pa.table({k: [r[k] for r in recs] for k in recs[0]}), path)
    return path


def infer_cli(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert main(["schema", "infer", *args]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("suffix", [".jsonl", ".csv", ".parquet"])
def test_infer_proposes_slots_hash_kinds_and_towers(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     suffix: str) -> None:
    data = write(tmp_path / f"ratings{suffix}", ratings())
    text = infer_cli(capsys, str(data), "--user", "user", "--item", "movie_id")
    path = tmp_path / "proposed.yaml"
    path.write_text(text)
    config = load_config(path)  # the project's loader: unknown keys and bad values are errors
    schema, model = config.schema_, config.train.model
    assert schema.format == {".jsonl": "json", ".csv": "csv", ".parquet": "parquet"}[suffix]
    assert schema.label == "click" and schema.event_time == "ts"
    assert (schema.user_id, schema.item_id) == ("user", "movie_id")
    assert schema.dense_names == ["price"]
    kinds = {s.name: (s.hash.value, s.separator) for s in schema.sparse_slots}
    assert kinds == {"user": ("int", None), "movie_id": ("int", None), "studio": ("fnv1a", None),
                     "genres": ("fnv1a", "|" if suffix == ".csv" else None), "device": ("fnv1a", None),
                     "hour": ("int", None)}  # hour: 24 distinct integers -> sparse
    assert model.type.value == "two_tower" and model.n_dense == 1
    towers = {s.name: s.tower.value for s in model.slots}
    assert towers == {"user": "user", "movie_id": "item", "studio": "item", "genres": "item", "device": "user",
                      "hour": "user", "history": "user"}
    # a list slot is mean-pooled, as examples/two_tower_ratings.yaml pools its genres
    assert [s.pooling.value for s in model.slots if s.name == "genres"] == ["mean"]
    # a comment per guess
    assert "# integer ids -> sparse, int hash" in text and "constant for each item id" in text
    assert "Unix-seconds range" in text and "varies within an item id" in text
    # examples/two_tower_ratings.yaml: the user id on RMSprop-like steps, the last 20 liked items attention-pooled
    user = next(s for s in model.slots if s.name == "user")
    assert user.optimizer is not None and user.optimizer.kind == "adam" and user.optimizer.beta1 == 0.0
    assert schema.history is not None and (schema.history.slot, schema.history.length) == ("history", 20)
    assert [s.pooling.value for s in model.slots if s.name == "history"] == ["attention"]
    config = load_config(path)
    # the softmax's label-0 records: a commented line that loads once uncommented
    assert config.train.model.retrieval.label0_weight == 0.0
    hint = "    # retrieval: {label0_weight: 0.5}"
    path.write_text(text.replace(hint, hint.replace("# ", "", 1)))
    assert load_config(path).train.model.retrieval.label0_weight == 0.5


def test_without_user_and_item_a_wide_deep_model_over_every_field(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    recs = [{k: v for k, v in r.items() if k != "price"} | {"flag": True} for r in ratings(300)]
    data = write(tmp_path / "r.jsonl", recs)
    path = tmp_path / "p.yaml"
    assert main(["schema", "infer", str(data), "--out", str(path)]) == 0
    config = load_config(path)
    assert config.train.model.type.value == "wide_deep"
    assert config.train.model.n_dense == 0  # no dense field: the model must say so
    assert {s.name for s in config.train.model.slots} == {s.name for s in config.schema_.sparse_slots}
    assert "# flag: ignored: booleans" in path.read_text()


def test_infer_names_what_is_wrong(tmp_path: Path) -> None:
    data = write(tmp_path / "r.jsonl", [{"price": 40, "user": 1, "tag": "a"}, {"price": 55, "user": 2, "tag": "b"}])
    with pytest.raises(InvalidInput, match="no label column"):
        infer_schema(data)
    not_a_label = r"must hold numbers in \[0, 1\] or a rating scale"
    with pytest.raises(InvalidInput, match=rf"label column 'price' {not_a_label} \(at most"):
        infer_schema(data, label="price")
    with pytest.raises(InvalidInput, match=rf"label column 'tag' {not_a_label}; the sample has 'a'"):
        infer_schema(data, label="tag")
    with pytest.raises(InvalidInput, match="--item 'movie' is not a column"):
        infer_schema(data, label="price", user="user", item="movie")
    with pytest.raises(InvalidInput, match="--format"):
        infer_schema(write(tmp_path / "r.log", [{"a": 1}]))
    assert main(["schema", "infer", str(data), "--user", "user"]) == 2  # --item missing: a clear error, exit 2


@pytest.mark.parametrize(("scale", "at_least"), [([1, 2, 3, 4, 5], 4), ([0.5 * k for k in range(1, 11)], 4),
                                                 (list(range(1, 11)), 8)])
def test_a_rating_label_is_proposed_as_a_derived_label(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                        scale: list[float], at_least: float) -> None:
    recs = [{"user": i % 7, "movie": i % 11, "rating": scale[i % len(scale)]} for i in range(200)]
    data = write(tmp_path / "r.jsonl", recs)
    path = tmp_path / "p.yaml"
    path.write_text(infer_cli(capsys, str(data)))  # found by its name, no --label
    schema = load_config(path).schema_
    assert schema.label == LabelRule(field="rating", at_least=at_least)
    assert f'label: {{field: "rating", at_least: {at_least:g}}}  # ratings' in path.read_text()
    assert {s.name for s in schema.slots} == {"user", "movie"}  # the rating is no input


def test_a_field_some_records_lack_is_proposed_optional(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    recs = [{"user": i % 7, "movie": i % 11, "click": i % 2, "price": 1.5 * i} for i in range(200)]
    for r in recs[:40]:
        del r["price"]  # the log's first records predate the field
    path = tmp_path / "p.yaml"
    path.write_text(infer_cli(capsys, str(write(tmp_path / "r.jsonl", recs)), "--user", "user", "--item", "movie"))
    slots = {s.name: s for s in load_config(path).schema_.slots}
    assert slots["price"].optional and not slots["user"].optional and not slots["movie"].optional
    assert "absent from 40 of 200 records -> optional" in path.read_text()


@pytest.mark.process
@pytest.mark.parametrize("suffix", [".jsonl", ".csv", ".parquet"])
def test_train_files_runs_the_proposed_config(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                              suffix: str) -> None:
    recs = ratings(1500, seed=1)
    train, test = write(tmp_path / f"train{suffix}", recs[:1200]), write(tmp_path / f"test{suffix}", recs[1200:])
    path = tmp_path / "p.yaml"
    path.write_text(infer_cli(capsys, str(train), "--user", "user", "--item", "movie_id"))
    assert main(["train-files", "--config", str(path), "--train", str(train), "--test", str(test),
                 "--batch-size", "256", "--json"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["train_rows"] == 1200 and result["test_rows"] == 300
    assert 0.0 <= result["test_auc"] <= 1.0


def test_train_files_needs_a_schema_for_other_formats(tmp_path: Path) -> None:
    data = write(tmp_path / "r.csv", ratings(10))
    from cli.commands.train import run_files
    from cli.main import build_parser

    args = build_parser().parse_args(["train-files", "--train", str(data), "--test", str(data)])
    with pytest.raises(ConfigError, match=r"csv files need their schema: --config FILE"):
        run_files(args)


def test_a_field_named_history_leaves_the_user_history_another_name(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    recs = [{**r, "history": r["device"]} for r in ratings(300)]
    path = tmp_path / "p.yaml"
    path.write_text(infer_cli(capsys, str(write(tmp_path / "r.jsonl", recs)), "--user", "user", "--item", "movie_id"))
    config = load_config(path)
    assert config.schema_.history is not None and config.schema_.history.slot == "user_history"
    assert {"history", "user_history"} <= {s.name for s in config.train.model.slots}
