"""The record sources of `streamrec up` (and what supervision found):

- a replay goes as fast as the trainers take it, held back by the consumer group's lag: the lag
  samples the replayer records stay within ``up.replay.max_lag`` plus one chunk, it did pause,
  and every record of the file is trained exactly once;
- a generator killed with -9 is restarted and goes on after what it put on the topic: each
  partition holds the generated events placed there, in order, none twice and none missing; a
  restarted replay likewise sends only the lines not yet on the topic;
- a configured ``service.read_through`` reads from the shards `up` started.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml
from kafka import KafkaConsumer, TopicPartition

from launcher.launch import free_ports
from logrecords.generator import PlantedModel
from logrecords.sample_encoding import json_lines, write_dataset
from streaming.connection import client_options
from streaming.kafka_config import KafkaConfig
from streaming.producer import log_ends
from trainer import checkpoints

from .conftest import SMALL_UP
from .test_up_e2e import Up
from .test_up_signals import shard_endpoints
from .test_up_supervision import pid_of_cmdline

pytestmark = pytest.mark.process

RECORDS = 4000
MAX_LAG = 400
RATE = 400  # generated events per second


@pytest.fixture
def up_with(tmp_path: Path) -> Iterator[Callable[..., Up]]:
    started: list[Up] = []

    def start(config: dict, *extra: str) -> Up:
        path = tmp_path / "streamrec.yaml"
        path.write_text(yaml.safe_dump(config))
        (port,) = free_ports(1)
        started.append(Up(tmp_path / "run", path, port, extra=list(extra)))
        return started[-1]

    yield start
    for up in started:
        up.kill()


def trained(run_dir: Path) -> int:
    root = run_dir / "checkpoints"
    done = checkpoints.complete_passes(root) if root.is_dir() else []
    return int(checkpoints.read_pass(root, done[-1])["records_total"]) if done else 0


def test_a_replay_is_held_back_by_the_trainers_lag_and_trained_once(up_with: Callable[..., Up],
                                                                    tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    write_dataset(str(events), PlantedModel(seed=3), RECORDS, fmt="json")
    config = {**SMALL_UP, "up": {**SMALL_UP["up"], "commit_on_exit": True, "replay": {"max_lag": MAX_LAG}}}
    up = up_with(config, "--replay", str(events))
    up.wait_for(f"all {RECORDS} records trained", lambda: trained(up.run_dir) == RECORDS)
    log = up.run_dir / "logs" / "replay.log"
    up.wait_for("the replay's end", lambda: "produced" in log.read_text())

    samples = [json.loads(line) for line in log.read_text().splitlines() if line.startswith('{"event": "lag"')]
    chunk = MAX_LAG // 4  # records sent between two reads
    assert samples and all(s["lag"] is not None for s in samples)
    assert max(s["lag"] for s in samples) <= MAX_LAG + chunk, samples
    assert any(s["lag"] > MAX_LAG for s in samples), "the replay never waited for the trainers"
    assert max(s["sent"] for s in samples) >= RECORDS - chunk  # read up to the last chunk
    assert re.search(r"paused [1-9]\d* times", log.read_text())

    assert up.ctrl_c() == 0, up.output()
    assert trained(up.run_dir) == RECORDS  # the final pass added nothing: each record trained once


def partition_values(bootstrap: str, topic: str, partitions: int) -> dict[int, list[bytes]]:
    """Every record on each partition of ``topic`` up to its end now, in offset order."""
    kafka = KafkaConfig(bootstrap_servers=(bootstrap,), topic=topic, partitions=partitions)
    options = client_options(kafka, [bootstrap])
    ends = log_ends(options, topic, partitions)
    consumer = KafkaConsumer(**options, group_id=None, enable_auto_commit=False)
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        out: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
        while any(len(out[p]) < ends[p] for p in out):
            for tp, recs in consumer.poll(timeout_ms=500).items():
                out[tp.partition] += [r.value for r in recs if r.offset < ends[tp.partition]]
        return out
    finally:
        consumer.close()


def without_time(value: bytes) -> dict:
    record = json.loads(value)
    record.pop("ts")  # a restarted generator's clock goes on from now: the event itself is the same
    return record


def test_a_killed_generator_goes_on_after_what_it_produced_and_read_through_finds_the_shards(
        up_with: Callable[..., Up]) -> None:
    config = {**SMALL_UP, "up": {**SMALL_UP["up"], "generator": {"rate": RATE}},
              "service": {**SMALL_UP["service"], "read_through": {"endpoints": ["tcp://127.0.0.1:1"]}}}
    up = up_with(config)
    shards = shard_endpoints(up)
    service = yaml.safe_load((up.run_dir / "roles" / "service.yaml").read_text())
    assert service["read_through"]["endpoints"] == shards  # not the file's tcp://127.0.0.1:1

    effective = yaml.safe_load((up.run_dir / "streamrec.yaml").read_text())["kafka"]
    bootstrap, topic, parts = effective["bootstrap_servers"][0], effective["topic"], effective["partitions"]

    def on_topic() -> int:
        return sum(len(v) for v in partition_values(bootstrap, topic, parts).values())

    up.wait_for("generated events", lambda: on_topic() >= 600)
    for kill in (1, 2):  # twice: the second restart goes on from what the first one produced
        os.kill(pid_of_cmdline(up.run_dir, "generate"), signal.SIGKILL)
        up.wait_for(f"restart {kill}", lambda k=kill: len(re.findall(r"generator died \(exit -9\); restart",
                                                                     up.log.read_text())) >= k)
        before = on_topic()
        up.wait_for("more events after the restart", lambda b=before: on_topic() >= b + 600)

    got = partition_values(bootstrap, topic, parts)
    # the stream itself, as the generator draws it (a second's worth at a time), never killed
    model, expected = PlantedModel(seed=0), []
    while len(expected) < max(len(v) for v in got.values()) * parts:
        expected += [without_time(v) for v in json_lines(model.sample(RATE))]
    for p, values in got.items():  # event i in partition i % P, in order: none twice, none missing
        assert [without_time(v) for v in values] == expected[p::parts][:len(values)], f"partition {p}"
    assert up.ctrl_c() == 0, up.output()


def test_a_restarted_replay_sends_only_the_lines_not_on_the_topic(broker, tmp_path: Path) -> None:
    from cli.main import main

    lines = [json.dumps({"n": i}) for i in range(700)]
    events, cut = tmp_path / "events.jsonl", tmp_path / "cut.jsonl"
    events.write_text("\n".join(lines) + "\n")
    cut.write_text("\n".join(lines[:333]) + "\n")  # what a replay killed after 333 lines had sent
    topic = f"replay-restart-{time.monotonic_ns()}"
    config = tmp_path / "streamrec.yaml"
    config.write_text(yaml.safe_dump({"kafka": {"topic": topic, "dead_letter_topic": f"{topic}.dead",
                                                "partitions": 3}}))
    common = ["--format", "json", "--config", str(config), "--bootstrap", broker.bootstrap,
              "--since-offsets", "0:0,1:0,2:0"]
    assert main(["produce", "--file", str(cut), *common]) == 0
    assert main(["produce", "--file", str(events), *common]) == 0  # the restart: the same arguments, whole file
    assert main(["produce", "--file", str(events), *common]) == 0  # again: nothing is missing any more
    got = partition_values(broker.bootstrap, topic, 3)
    for p, values in got.items():
        assert [json.loads(v)["n"] for v in values] == list(range(p, 700, 3)), f"partition {p}"
