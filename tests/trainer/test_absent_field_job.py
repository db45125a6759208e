"""A log lacking a configured field, replayed through a real job (broker, a PS shard, `streamrec
train`): the records lacking it are counted per field on the trainer's /metrics and job status,
and once most records lack it they are refused and dead-lettered with a detail naming the field;
a field a few records lack is counted and trained with its default."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from launcher.launch import free_ports
from logrecords.generator import PlantedModel
from logrecords.sample_encoding import generated_json_schema, json_lines
from streaming.connection import client_options
from streaming.kafka_config import KafkaConfig
from streaming.producer import RecordProducer
from streaming.topics import ensure_topics
from trainer.job_config import load_job_config

from .conftest import topic_name
from .test_disk_full import _status

pytestmark = pytest.mark.process

RECORDS = 2000
LACKING = RECORDS * 3 // 4  # records without year


def _lines() -> list[bytes]:
    """Generated JSON records (about 20% lack I3); ``year`` only in every fourth."""
    lines = json_lines(PlantedModel(seed=3).sample(RECORDS))
    return [v[:-1] + b',"year":1999}' if i % 4 == 0 else v for i, v in enumerate(lines)]


def _job_yaml(tmp: Path, kafka: dict[str, Any]) -> Path:
    schema = generated_json_schema().model_dump(mode="json")
    for slot in schema["slots"]:
        slot["optional"] = slot["optional"] and slot["name"] != "I3"  # the generator leaves I3 out of some
    schema["slots"].append({"name": "year", "kind": "dense"})
    slots = [{"name": s["name"]} for s in schema["slots"] if s["kind"] == "sparse"]
    data = {"model": {"type": "wide_deep", "slots": slots, "embedding_dim": 4, "mlp": [8], "seed": 2},
            "records": schema, "kafka": kafka, "passes": {"records": 500},
            "checkpoint_dir": str(tmp / "checkpoints"), "export_dir": str(tmp / "exports")}
    path = tmp / "job.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_a_field_most_records_lack_is_counted_named_and_refused(broker, cluster, read_topic, tmp_path: Path) -> None:
    topic = topic_name()
    kafka = {"topic": topic, "dead_letter_topic": f"{topic}.dead", "group_id": f"g-{topic}", "partitions": 1,
             "batch_size": 500, "batch_timeout_ms": 500, "max_poll_interval_ms": 3000, "session_timeout_ms": 3000}
    config = KafkaConfig(**kafka)
    options = client_options(config, [broker.bootstrap])
    ensure_topics(config, options)
    with RecordProducer(config, options) as producer:
        producer.send_all(_lines())
    path = _job_yaml(tmp_path, kafka)
    cfg = load_job_config(path)
    c = cluster(cfg.model.table_configs())
    port = free_ports(1)[0]
    # idle long past the checks: the job must still be running when its status and /metrics are read
    job = c.train(path, broker.bootstrap, extra=("--max-idle-s", "300", "--metrics-port", str(port)))
    deadline = time.monotonic() + 240
    status: dict[str, Any] | None = None
    while not (status and status.get("absent_fields", {}).get("year") == LACKING):
        assert job.poll() is None, c.procs.log_of(job)[-3000:]
        assert time.monotonic() < deadline, f"job status never counted every record lacking year: {status}"
        time.sleep(0.3)
        status = _status(Path(cfg.checkpoint_dir))
    # refused from the first poll on that held 100 records (the backlog's polls hold 500)
    refused = status["rejected"]["absent_field"]
    assert LACKING - 100 <= refused <= LACKING and set(status["rejected"]) == {"absent_field"}
    assert 0.1 * RECORDS < status["absent_fields"]["I3"] < 0.3 * RECORDS  # counted, never refused
    samples = {(s.name, s.labels.get("field") or s.labels.get("reason")): s.value
               for f in text_string_to_metric_families(httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=30).text)
               for s in f.samples}
    assert samples[("streamrec_trainer_absent_field_records_total", "year")] == LACKING
    assert samples[("streamrec_trainer_rejected_records_total", "absent_field")] == refused
    dead = read_topic(f"{topic}.dead", refused)
    assert len(dead) == refused
    headers = dict(dead[0].headers)
    assert headers["reason"] == b"absent_field" and b"field 'year': absent" in headers["detail"]
