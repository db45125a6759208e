"""Two workers and two shards under `streamrec launch`: passes are committed together (a worker
whose pass ends first pulls the other into the commit), a worker whose stream runs dry leaves
and the rest go on; the final pass covers every partition's records exactly once."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from exports import bundle
from logrecords.generator import PlantedModel
from logrecords.sample_encoding import criteo_lines
from ps.ps_config import PSConfig
from streaming.connection import client_options
from streaming.kafka_config import KafkaConfig
from streaming.producer import RecordProducer
from streaming.topics import ensure_topics
from trainer import checkpoints
from trainer.job_config import load_job_config

from .conftest import REPO, topic_name

pytestmark = pytest.mark.process

RECORDS = 8000


def test_two_workers_commit_passes_together_and_cover_every_partition(broker, tmp_path: Path) -> None:
    topic = topic_name()
    kafka = {"topic": topic, "dead_letter_topic": f"{topic}.dead", "partitions": 4, "batch_size": 400,
             "batch_timeout_ms": 300}
    config = KafkaConfig(**kafka)
    options = client_options(config, [broker.bootstrap])
    ensure_topics(config, options)
    with RecordProducer(config, options) as producer:
        producer.send_all(criteo_lines(PlantedModel(seed=6).sample(RECORDS)))
    slots = [{"name": f"C{i}"} for i in range(1, 27)]
    job = {"model": {"type": "deepfm", "slots": slots, "embedding_dim": 4, "mlp": [16]}, "kafka": kafka,
           "passes": {"records": 2000, "base_every": 2}, "checkpoint_dir": str(tmp_path / "ck"),
           "export_dir": str(tmp_path / "ex")}
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    cfg = load_job_config(tmp_path / "job.yaml")
    ps = PSConfig(tables=cfg.model.table_configs())
    (tmp_path / "ps.yaml").write_text(yaml.safe_dump(ps.model_dump(mode="json")))
    # the launcher kills its shards and workers (their process groups) on every exit path
    done = subprocess.run([sys.executable, "-m", "cli", "launch", "--servers", "2", "--workers", "2", "--config",
                           str(tmp_path / "ps.yaml"), "--log-dir", str(tmp_path / "logs"), "--", sys.executable, "-m",
                           "cli.main", "train", "--config", str(tmp_path / "job.yaml"), "--bootstrap",
                           broker.bootstrap, "--max-idle-s", "4"], cwd=REPO, capture_output=True, text=True,
                          timeout=240)
    logs = "\n".join(p.read_text()[-1500:] for p in sorted((tmp_path / "logs").glob("worker.*.log")))
    assert done.returncode == 0, done.stderr[-2000:] + logs
    root = Path(cfg.checkpoint_dir)
    last = checkpoints.read_pass(root, checkpoints.complete_passes(root)[-1])
    assert last["records_total"] == RECORDS
    assert sum(last["offsets"].values()) == RECORDS and sorted(last["offsets"]) == ["0", "1", "2", "3"]
    assert len(last["shard_modes"]) == 2 and last["workers"] == 2
    versions = bundle.list_versions(Path(cfg.export_dir))
    assert versions and bundle.read_manifest(Path(cfg.export_dir), versions[-1]).num_shards == 2
