"""`streamrec produce` and `streamrec generate` against the real embedded broker."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from deploy.cli import main
from streaming.broker import EmbeddedBroker
from streaming.config import KafkaConfig
from streaming.criteo import CriteoParser
from streaming.generator import PlantedModel
from streaming.sample_encoding import criteo_lines, generated_criteo_schema


def test_produce_replays_a_file_into_the_topic(
    tmp_path: Path, broker: EmbeddedBroker, kafka_config: Callable[..., KafkaConfig],
    read_topic: Callable[..., list[Any]], capsys: pytest.CaptureFixture[str],
) -> None:
    config = kafka_config()
    lines = criteo_lines(PlantedModel(seed=1).sample(3000))
    path = tmp_path / "data.tsv"
    path.write_bytes(b"\n".join([*lines, b"broken line"]) + b"\n")
    code = main(["produce", "--file", str(path), "--format", "criteo", "--topic", config.topic,
                 "--bootstrap", broker.bootstrap, "--rate", "100000"])
    assert code == 0
    out = capsys.readouterr()
    assert "produced 3001 records" in out.out and "field_count" in out.err
    got = read_topic(config.topic, 3001)
    assert sorted(r.value for r in got) == sorted([*lines, b"broken line"])


def test_produce_without_a_cluster_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "data.tsv"
    path.write_bytes(b"")
    assert main(["produce", "--file", str(path), "--format", "criteo"]) == 2
    assert "bootstrap_servers" in capsys.readouterr().err


def test_generate_streams_planted_events_and_reports_bayes_auc(
    broker: EmbeddedBroker, kafka_config: Callable[..., KafkaConfig],
    read_topic: Callable[..., list[Any]], capsys: pytest.CaptureFixture[str],
) -> None:
    config = kafka_config()
    assert main(["generate", "--rows", "5000", "--seed", "3", "--topic", config.topic,
                 "--bootstrap", broker.bootstrap]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["records"] == 5000 and 0.7 < report["bayes_auc"] < 0.85
    batch, rejected = CriteoParser(generated_criteo_schema()).parse([r.value for r in read_topic(config.topic, 5000)])
    assert rejected == [] and len(batch) == 5000


def test_generate_writes_a_criteo_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "train.tsv"
    assert main(["generate", "--out", str(out), "--rows", "20000", "--format", "criteo", "--seed", "5"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["rows"] == 20000 and 0.74 < report["bayes_auc"] < 0.82
    lines = out.read_bytes().splitlines()
    assert len(lines) == 20000 and all(len(ln.split(b"\t")) == 40 for ln in lines[:100])
