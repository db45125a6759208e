"""The model must fit the schema it trains on: a schema without dense
fields used to crash both trainers at the first batch (`batch dense is (1004, 0), model needs
(1004, 13)`) while `streamrec config check` accepted the config."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from core.errors import ConfigError
from launcher.system_config import load_config, role_files
from logrecords.parsers import make_parser
from models import build_model
from trainer.job_config import JobConfig, load_job_config
from trainer.params import LocalStore
from trainer.worker import Worker

REPO = Path(__file__).resolve().parents[2]
# a ratings log as JSON lines: integer ids, a list of genres, a Unix time, no dense field
SCHEMA = {"format": "json", "label": "click", "event_time": "ts", "user_id": "user", "item_id": "movie",
          "slots": [{"name": "user", "kind": "sparse"}, {"name": "movie", "kind": "sparse"},
                    {"name": "genres", "kind": "sparse"}]}
TWO_TOWER = {"type": "two_tower", "embedding_dim": 4, "mlp": [8], "tower_dim": 4,
             "slots": [{"name": "user", "tower": "user"}, {"name": "movie", "tower": "item"},
                       {"name": "genres", "tower": "item"}]}
LINES = [b'{"click": %d, "user": %d, "movie": %d, "genres": [%d, 7], "ts": 1700000000}' % (i % 2, i % 5, i % 3, i)
         for i in range(40)]


def write(tmp_path: Path, data: dict, name: str = "streamrec.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return path


def config_check(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cli", "config", "check", "--config", str(path)],
                          capture_output=True, text=True, cwd=REPO, timeout=120)


@pytest.mark.process
def test_dense_width_comes_from_the_schema_and_the_model_trains(tmp_path: Path) -> None:
    path = write(tmp_path, {"schema": SCHEMA, "train": {"model": TWO_TOWER}})
    config = load_config(path)
    assert config.train.model.n_dense == 0
    done = config_check(path)
    assert done.returncode == 0, done.stderr
    # what the trainers read (train.yaml) says it too, and the job config built from it trains on the records
    train = role_files(config, base=tmp_path)["train.yaml"]
    assert train["model"]["n_dense"] == 0
    job = load_job_config(write(tmp_path, train, "train.yaml"))
    model = build_model(job.model)
    batch, rejected = make_parser(job.records).parse(LINES)
    assert not rejected and batch.dense.shape == (40, 0)
    worker = Worker(model, LocalStore(model.tables, model.params.values))
    assert worker.step(batch) > 0 and worker.records == 40


def test_the_default_schema_keeps_its_13_dense_inputs() -> None:
    assert load_config(None).train.model.n_dense == 13
    job = JobConfig.model_validate({"model": {"slots": [{"name": "C1"}]}})  # records default: Criteo
    assert job.model.n_dense == 13


@pytest.mark.process
@pytest.mark.parametrize(("model", "key", "hint"), [
    ({**TWO_TOWER, "n_dense": 13}, "train.model.n_dense", "set n_dense: 0"),
    ({**TWO_TOWER, "slots": [*TWO_TOWER["slots"], {"name": "year", "tower": "item"}]}, "train.model.slots.3.name",
     "'year' is not a sparse slot of the schema"),
    ({**TWO_TOWER, "slots": [{"name": "user", "tower": "user"}, {"name": "movie", "tower": "user"},
                             {"name": "genres", "tower": "item"}]}, "train.model.slots.1.tower",
     "the schema's item_id"),
])
def test_a_model_that_contradicts_its_schema_is_refused_naming_the_key(
        tmp_path: Path, model: dict, key: str, hint: str) -> None:
    path = write(tmp_path, {"schema": SCHEMA, "train": {"model": model}})
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(path) in str(err.value) and key in str(err.value) and hint in str(err.value)
    done = config_check(path)
    assert done.returncode != 0 and key in done.stderr and str(path) in done.stderr, done.stderr


def test_the_job_config_checks_its_model_against_its_records(tmp_path: Path) -> None:
    path = write(tmp_path, {"records": SCHEMA, "model": {**TWO_TOWER, "n_dense": 13}}, "job.yaml")
    with pytest.raises(ConfigError) as err:
        load_job_config(path)
    assert str(path) in str(err.value) and "model.n_dense is 13" in str(err.value)
    assert load_job_config(write(tmp_path, {"records": SCHEMA, "model": {**TWO_TOWER, "n_dense": None}},
                                 "null.yaml")).model.n_dense == 0
