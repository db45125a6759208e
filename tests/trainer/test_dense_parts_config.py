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


def test_auto_gives_the_mlp_a_step_per_eight_workers_and_one_elsewhere(tmp_path: Path) -> None:
    from models import build_model
    from trainer.worker import dense_parts_for

    from .test_learning import criteo_model

    wide = build_model(criteo_model("wide_deep"))
    towers = build_model(load_config(None).train.model)  # the default two towers: no MLP to split
    got = {w: dense_parts_for("auto", workers=w, mode="async", model=wide) for w in (1, 2, 7, 8, 15, 16, 31, 32, 64)}
    assert got == {1: 1, 2: 1, 7: 1, 8: 1, 15: 1, 16: 2, 31: 3, 32: 4, 64: 8}
    assert dense_parts_for("auto", workers=32, mode="sync", model=wide) == 1  # sync applies the change once a step
    assert dense_parts_for("auto", workers=32, mode="async", model=towers) == 1
    assert dense_parts_for(3, workers=32, mode="async", model=wide) == 3  # a number is taken as it is


def test_auto_is_the_default_and_fits_every_model(tmp_path: Path) -> None:
    root = load_config(None)
    assert root.train.dense_parts == "auto"
    job = {"model": root.train.model.model_dump(mode="json"), "records": root.schema_.model_dump(mode="json")}
    path = tmp_path / "job.yaml"
    for parts in ("auto", None):
        path.write_text(yaml.safe_dump(job if parts is None else {**job, "dense_parts": parts}))
        assert load_job_config(path).dense_parts == "auto"
    for bad in (0, 65, "many"):
        path.write_text(yaml.safe_dump({**job, "dense_parts": bad}))
        with pytest.raises(ConfigError, match="dense_parts"):
            load_job_config(path)
