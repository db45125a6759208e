"""`streamrec produce` and `streamrec generate` against the real embedded broker."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cli.main import main
from logrecords.criteo import CriteoParser
from logrecords.generator import PlantedModel
from logrecords.sample_encoding import criteo_lines, generated_criteo_schema
from streaming.broker import EmbeddedBroker
from streaming.kafka_config import KafkaConfig


@pytest.mark.process
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


@pytest.mark.process
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


@pytest.mark.process
def test_open_ended_generate_serves_an_embedded_broker_until_ctrl_c() -> None:
    import signal
    import subprocess
    import sys

    from kafka import KafkaConsumer, TopicPartition

    from streaming.broker import broker_answers

    proc = subprocess.Popen(
        [sys.executable, "-c", "from cli.main import main; raise SystemExit(main())", "generate", "--rate", "5000",
         "--topic", "live", "--format", "json"],
        cwd=Path(__file__).resolve().parents[2], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert proc.stderr is not None
        address = proc.stderr.readline().split()[3]
        consumer = KafkaConsumer(bootstrap_servers=[address], enable_auto_commit=False)
        tp = TopicPartition("live", 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        got: list[Any] = []
        for _ in range(100):
            for recs in consumer.poll(timeout_ms=200).values():
                got.extend(recs)
            if len(got) >= 100:
                break
        consumer.close()
        assert len(got) >= 100 and json.loads(got[0].value)["user_id"]
    finally:
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0
    assert json.loads(out)["records"] >= 100
    assert not broker_answers(address, timeout_s=0.5)
