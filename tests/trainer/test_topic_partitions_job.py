"""Two trainers on a topic with more partitions than ``kafka.partitions`` says: the partitions come
from the topic, so every record is trained once (none left unread behind a "lag 0"); the job's
``records_total`` counts both workers' records, as the manifest does; records stamped far in
the future are trained, counted, and leave the freshness figures sane."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml
from kafka import KafkaProducer

from logrecords.generator import PlantedModel
from logrecords.sample_encoding import criteo_lines
from streaming.connection import client_options
from streaming.consumer import FUTURE_SKEW_S
from streaming.kafka_config import KafkaConfig
from streaming.producer import RecordProducer
from streaming.topics import ensure_topics
from trainer import checkpoints
from trainer.job_config import load_job_config

from .conftest import topic_name
from .test_streaming_job import wait_exit

pytestmark = pytest.mark.process

RECORDS = 6001
AHEAD = 30  # at the end of partition 0 (the chief's), stamped in 2100
YEAR_2100_MS = 4_102_444_800_000


def test_two_workers_train_every_partition_of_the_topic_once(broker, cluster, tmp_path: Path) -> None:
    topic = topic_name()
    kafka = {"topic": topic, "dead_letter_topic": f"{topic}.dead", "partitions": 4, "batch_size": 500,
             "batch_timeout_ms": 300}
    made = KafkaConfig(**{**kafka, "partitions": 6})  # the topic as someone else created it
    options = client_options(made, [broker.bootstrap])
    ensure_topics(made, options)
    lines = criteo_lines(PlantedModel(seed=5).sample(RECORDS + AHEAD))
    with RecordProducer(made, options) as producer:
        producer.send_all(lines[:RECORDS], partitions=(i % 6 for i in range(RECORDS)))
    ahead = KafkaProducer(bootstrap_servers=[broker.bootstrap])
    for line in lines[RECORDS:]:
        ahead.send(topic, value=line, partition=0, timestamp_ms=YEAR_2100_MS)
    ahead.flush()
    ahead.close()
    slots = [{"name": f"C{i}"} for i in range(1, 27)]
    job = {"model": {"type": "wide_deep", "slots": slots, "embedding_dim": 4, "mlp": [16]}, "kafka": kafka,
           "passes": {"records": 2000, "base_every": 2}, "checkpoint_dir": str(tmp_path / "ck"),
           "export_dir": str(tmp_path / "ex")}
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    cfg = load_job_config(path)
    c = cluster(cfg.model.table_configs())
    workers = [c.train(path, broker.bootstrap, rank=r, workers=2, mode="async") for r in range(2)]
    for w in workers:
        assert wait_exit(w) == 0, c.procs.log_of(w)[-3000:]
    ended_by = time.time()
    root = Path(cfg.checkpoint_dir)
    last = checkpoints.read_pass(root, checkpoints.complete_passes(root)[-1])
    total = RECORDS + AHEAD
    assert last["records_total"] == total
    assert sorted(last["offsets"]) == [str(p) for p in range(6)] and sum(last["offsets"].values()) == total
    assert last["newest_record_time"] <= ended_by + FUTURE_SKEW_S
    chief = json.loads(c.procs.log_of(workers[0]).strip().splitlines()[-1])
    assert chief["records_total"] == total  # every worker's records, not the chief's own
    assert chief["future_records"] == AHEAD and chief["lag"] == 0
    assert chief["newest_record_time"] <= ended_by + FUTURE_SKEW_S
