"""After each committed pass the chief records the pass's offsets in the
Kafka consumer group, so standard tools (here KafkaAdminClient.list_group_offsets) see
streamrec's lag as log end - committed. Real tansu broker, shard and `streamrec train`."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition

from streaming.connection import client_options
from streaming.kafka_config import KafkaConfig
from trainer import checkpoints
from trainer.job_config import load_job_config

from .conftest import topic_name
from .test_streaming_job import RECORDS, job_yaml, produce, wait_exit

pytestmark = pytest.mark.process

EXTRA = 300


def log_ends(options: dict, topic: str, partitions: int) -> dict[int, int]:
    """Every partition's exact end, by reading it (tansu's list-offsets "latest" can fall short)."""
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    consumer = KafkaConsumer(**options, enable_auto_commit=False)
    try:
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        ends = dict.fromkeys(range(partitions), 0)
        deadline, quiet = time.monotonic() + 60, 0
        while quiet < 5 and time.monotonic() < deadline:
            got = consumer.poll(timeout_ms=200)
            quiet = 0 if got else quiet + 1
            for tp, recs in got.items():
                ends[tp.partition] = max(ends[tp.partition], recs[-1].offset + 1)
        return ends
    finally:
        consumer.close()


def group_offsets(options: dict, group: str) -> dict[int, int]:
    admin = KafkaAdminClient(**options)
    try:
        return {tp.partition: om.offset for tp, om in admin.list_group_offsets(group)[group].items()}
    finally:
        admin.close()


def test_committed_passes_show_in_the_consumer_group(broker, cluster, tmp_path: Path) -> None:
    topic = topic_name()
    kafka = {"topic": topic, "dead_letter_topic": f"{topic}.dead", "group_id": f"g-{topic}", "partitions": 2,
             "batch_size": 500, "batch_timeout_ms": 500, "max_poll_interval_ms": 3000, "session_timeout_ms": 3000}
    produce(broker.bootstrap, kafka=kafka)
    path = job_yaml(tmp_path, "run", kafka)
    cfg = load_job_config(path)
    options = client_options(KafkaConfig(**kafka), [broker.bootstrap])
    c = cluster(cfg.model.table_configs())
    job = c.train(path, broker.bootstrap)
    assert wait_exit(job) == 0, c.procs.log_of(job)[-3000:]

    root = Path(cfg.checkpoint_dir)
    last = checkpoints.read_pass(root, checkpoints.complete_passes(root)[-1])
    want = {int(p): o for p, o in last["offsets"].items()}
    assert sorted(want) == [0, 1] and sum(want.values()) == RECORDS
    assert group_offsets(options, kafka["group_id"]) == want  # the last pass's offsets, every partition
    assert log_ends(options, topic, 2) == want  # everything trained: no lag

    produce(broker.bootstrap, kafka=kafka, stop=EXTRA)  # records nobody trained yet
    ends = log_ends(options, topic, 2)
    committed = group_offsets(options, kafka["group_id"])
    lag = {p: ends[p] - committed[p] for p in ends}
    assert sum(lag.values()) == EXTRA and min(lag.values()) >= 0
