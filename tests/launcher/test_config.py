"""The one streamrec YAML: defaults work, unknown keys name key and file, role files load in each role's model."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from core.errors import ConfigError
from launcher.system_config import StreamrecConfig, load_config, write_role_files
from ps.ps_config import load_ps_config
from service.settings import load_settings
from trainer.job_config import load_job_config

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.yaml"))


def test_defaults_work_out_of_the_box() -> None:
    config = load_config(None)
    assert config.up.host == "127.0.0.1" and config.up.port == 8000
    assert config.kafka.bootstrap_servers == ()  # embedded broker
    assert config.up.commit_on_exit and config.up.shards >= 1 and config.up.workers >= 1


def test_unknown_key_is_an_error_naming_key_and_file(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("up:\n  shards: 2\n  sharsd: 3\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert "up.sharsd" in err.value.message and str(path) in err.value.message


def test_role_files_load_with_each_roles_own_loader(tmp_path: Path) -> None:
    path = tmp_path / "streamrec.yaml"
    path.write_text(yaml.safe_dump({"train": {"model": {"type": "wide_deep", "slots": [{"name": "C3"}]},
                                              "export_dir": "out/exports"}, "up": {"port": 9001}}))
    files = write_role_files(load_config(path), tmp_path / "roles", base=tmp_path, overrides={"port": 9002})
    ps = load_ps_config(files["ps.yaml"])
    train = load_job_config(files["train.yaml"])
    service = load_settings(files["service.yaml"], env={})
    assert [t.name for t in ps.tables] == [t.name for t in train.model.table_configs()]
    assert train.export_dir == service.exports_dir == str(tmp_path / "out" / "exports")
    assert service.port == 9002


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_examples_are_full_root_configs(path: Path, tmp_path: Path) -> None:
    config = load_config(path)
    assert isinstance(config, StreamrecConfig)
    files = write_role_files(config, tmp_path, base=tmp_path)
    load_job_config(files["train.yaml"])


def test_a_partial_train_section_keeps_the_up_defaults(tmp_path: Path) -> None:
    path = tmp_path / "streamrec.yaml"
    path.write_text("train:\n  model:\n    type: deepfm\n    slots: [{name: user_id}, {name: item_id}]\n")
    config = load_config(path)
    assert config.train.passes == load_config(None).train.passes  # a pass every few seconds, not 100k records
    assert config.train.passes.seconds is not None and config.train.passes.records is None
