"""``dense_parts`` > 1 fits only a model with an MLP to split: a config asking it of another model is
refused where it is read (the root YAML and a job's own), naming the key, not by each trainer at start."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from core.errors import ConfigError
from launcher.system_config import load_config
from trainer.job_config import load_job_config


def _root(tmp_path: Path, train: dict) -> Path:
    path = tmp_path / "streamrec.yaml"
    path.write_text(yaml.safe_dump({"train": train}))
    return path


def test_the_root_config_refuses_dense_parts_for_a_model_without_an_mlp(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"train\.dense_parts 4: only wide_deep and deepfm"):
        load_config(_root(tmp_path, {"dense_parts": 4}))  # the default model: two towers


def test_the_root_config_takes_dense_parts_for_wide_deep(tmp_path: Path) -> None:
    model = yaml.safe_load((Path(__file__).parents[2] / "examples" / "wide_deep.yaml").read_text())["train"]["model"]
    assert load_config(_root(tmp_path, {"dense_parts": 4, "model": model})).train.dense_parts == 4


def test_a_job_config_refuses_dense_parts_for_a_model_without_an_mlp(tmp_path: Path) -> None:
    root = load_config(None)
    job = {"model": root.train.model.model_dump(mode="json"), "records": root.schema_.model_dump(mode="json"),
           "dense_parts": 2}
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    with pytest.raises(ConfigError, match=r"dense_parts 2: only wide_deep and deepfm"):
        load_job_config(path)
    path.write_text(yaml.safe_dump({**job, "dense_parts": 1}))
    assert load_job_config(path).dense_parts == 1
