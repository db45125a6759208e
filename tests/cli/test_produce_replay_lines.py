"""`streamrec produce` of a replay: a line too long for a Kafka request is refused with a message
naming it, keeps its place (the consumers dead-letter it as oversized) and the other lines go
on; ``--skip-offsets`` leaves out the lines a committed pass already trained, per partition, and
a restarted replay still sends only what is missing."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cli.main import main
from logrecords.schema_config import SchemaConfig, SlotConfig, SlotKind
from streaming.broker import EmbeddedBroker
from streaming.consumer import StreamConsumer
from streaming.kafka_config import KafkaConfig

pytestmark = pytest.mark.process

SCHEMA = SchemaConfig(format="json", slots=(SlotConfig(name="n", kind=SlotKind.SPARSE),))
SINCE = "0:0,1:0,2:0,3:0"


def _line(i: int) -> bytes:
    return json.dumps({"label": i % 2, "n": i}).encode()


def test_a_line_over_the_request_limit_is_refused_and_the_rest_go_on(
        tmp_path: Path, broker: EmbeddedBroker, kafka_config: Callable[..., KafkaConfig],
        read_topic: Callable[..., list[Any]], capsys: pytest.CaptureFixture[str]) -> None:
    config = kafka_config(partitions=4)
    huge = json.dumps({"label": 1, "n": "x" * (2 << 20)}).encode()
    records = [_line(0), _line(1), huge, _line(3), _line(4), _line(5)]
    path = tmp_path / "events.jsonl"
    # an empty line first: the message names the file's line (4), not the record's index (2)
    path.write_bytes(b"\n" + b"\n".join(records) + b"\n")
    code = main(["produce", "--file", str(path), "--format", "json", "--topic", config.topic,
                 "--bootstrap", broker.bootstrap, "--since-offsets", SINCE])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert f"line 4 of {path} is {len(huge)} bytes" in out.err and "refused" in out.err
    assert "produced 6 records" in out.out and "1 lines too long" in out.out
    on_topic = read_topic(config.topic, 6)
    assert sorted((r.partition, r.offset) for r in on_topic) == sorted((i % 4, i // 4) for i in range(6))
    cut = next(r for r in on_topic if r.partition == 2)  # record 2 kept its place, cut
    assert huge.startswith(cut.value) and len(cut.value) == config.max_message_bytes + 1
    batches = []
    with StreamConsumer(config, SCHEMA, [broker.bootstrap]) as consumer:
        deadline = time.monotonic() + 60
        while sum(map(len, batches)) < 5 and time.monotonic() < deadline:
            batch = consumer.poll_batch()
            if batch is not None:
                batches.append(batch)
                consumer.tracker.mark_pushed(batch)
        assert consumer.reject_counts == {"oversized": 1}
        assert consumer.committable() == {0: 2, 1: 2, 2: 1, 3: 1}  # every record read, the cut one too
    assert sum(map(len, batches)) == 5
    (letter,) = read_topic(config.dead_letter_topic, 1)
    assert dict(letter.headers)["reason"] == b"oversized" and huge.startswith(letter.value)


def test_skip_offsets_leave_out_trained_lines_and_a_restart_sends_none_twice(
        tmp_path: Path, broker: EmbeddedBroker, kafka_config: Callable[..., KafkaConfig],
        read_topic: Callable[..., list[Any]], capsys: pytest.CaptureFixture[str]) -> None:
    config = kafka_config(partitions=4)
    path = tmp_path / "events.jsonl"
    path.write_bytes(b"\n".join(_line(i) for i in range(14)) + b"\n")
    argv = ["produce", "--file", str(path), "--format", "json", "--topic", config.topic,
            "--bootstrap", broker.bootstrap, "--since-offsets", SINCE, "--skip-offsets", "0:2,1:1,2:0,3:1"]
    assert main(argv) == 0
    assert "produced 10 records" in capsys.readouterr().out  # lines 0, 4, 1 and 3 were trained
    assert main(argv) == 0
    assert "produced 0 records" in capsys.readouterr().out
    got = read_topic(config.topic, 10)
    sent = sorted(json.loads(r.value)["n"] for r in got)
    assert sent == [2, 5, 6, 7, 8, 9, 10, 11, 12, 13]
    assert all(r.partition == json.loads(r.value)["n"] % 4 for r in got)
    assert main([*argv[:-1], "0:1"]) == 2  # one partition named, the topic has four
    assert "--skip-offsets" in capsys.readouterr().err
