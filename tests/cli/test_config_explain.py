"""One default per key, whatever the entry point; and `streamrec config explain KEY` saying what a
key means, its type, default, defining model and readers."""

from __future__ import annotations

import argparse

import pytest

from cli.commands.config import run_explain
from core.errors import ConfigError
from launcher.config_explain import explain
from launcher.system_config import ServiceSection, StreamrecConfig, TrainSection
from service.settings import ServiceSettings
from trainer.job_config import JobConfig


def test_the_root_yaml_and_each_role_s_own_file_share_every_default() -> None:
    # the root's sections take the roles' models as they are: the same key, the same default
    for name, field in ServiceSection.model_fields.items():
        if name != "exports_dir":  # the root's one is train.export_dir, filled in when left empty
            assert field.get_default(call_default_factory=True) == ServiceSettings.model_fields[name].get_default(
                call_default_factory=True), f"service.{name}"
    for name, field in TrainSection.model_fields.items():
        if name != "model":  # a job file must name its model; the root's default is the generator's two towers
            assert field.get_default(call_default_factory=True, validated_data={}) == JobConfig.model_fields[
                name].get_default(call_default_factory=True, validated_data={}), f"train.{name}"
    root = StreamrecConfig()
    assert root.service.port == root.up.port == 8000 and root.service.poll_seconds == 0.5
    assert (root.train.passes.records, root.train.passes.seconds, root.train.metric_window) == (None, 2.0, 20_000)


def test_a_pass_by_records_alone_when_only_records_is_set() -> None:
    passes = StreamrecConfig.model_validate({"train": {"passes": {"records": 5000}}}).train.passes
    assert (passes.records, passes.seconds) == (5000, None)


def test_explain_prints_description_type_default_model_and_readers(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_explain(argparse.Namespace(key="train.passes.seconds")) == 0
    text = capsys.readouterr().out
    assert text.startswith("train.passes.seconds\n")
    for part in ("A pass (a checkpoint and a bundle) ends after", "type:       float or null", "default:    `2.0`",
                 "defined in: trainer.job_config.PassConfig", "read by:    the trainers"):
        assert part in text
    # a mapping's entry by `*` or by a name, a list's items by their name
    for key in ("ps.tables.*.eviction.ttl_passes", "ps.tables.emb8.eviction.ttl_passes"):
        assert explain(key).startswith("ps.tables.<name>.eviction.ttl_passes\n")
    assert "default:    `false`" in explain("schema.slots.optional")
    section = explain("ps.tables.*.eviction")
    assert "  keys:\n" in section and "    max_rows " in section


def test_an_unknown_key_names_the_nearest() -> None:
    with pytest.raises(ConfigError, match=r"no config key 'ps\.tables\.\*\.eviction\.ttl'; did you mean .*ttl_passes"):
        explain("ps.tables.*.eviction.ttl")
