"""deploy/grafana/streamrec.json and deploy/prometheus/alerts.yml against what the roles really
export: the dashboard loads, each role has panels, and every metric the dashboard's queries and
the alert rules' expressions name is served by a real role: a shard process, a `streamrec train`
worker (embedded broker) and the service app reading that worker's bundles, each scraped on its
/metrics, where every role also has its process metrics, its build info and HELP that explains."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from fastapi.testclient import TestClient

from core.errors import NotFound
from launcher.launch import free_ports
from logrecords.generator import PlantedModel
from logrecords.sample_encoding import generated_json_schema, json_lines
from ps.client import PSClient
from ps.cluster import ClusterSpec, cluster_env
from ps.ps_config import ClientConfig, PSConfig
from service.app import create_app
from service.settings import ServiceSettings
from streaming.connection import client_options
from streaming.kafka_config import KafkaConfig
from streaming.producer import RecordProducer
from streaming.topics import ensure_topics
from tables.table_config import DiskTierConfig, TierConfig
from tests.deploy.test_alert_rules import alert_metrics, expr_metrics
from tests.prom_scrape import REPO, assert_help_explains, samples, scrape, shard_with_metrics, wait_scrape
from trainer.job_config import load_job_config

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "streamrec.json"
METRIC = re.compile(r"\bstreamrec_[a-z0-9_]+")
RECORDS = 2000


def _panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for panel in dashboard["panels"]:
        out += [panel, *panel.get("panels", [])]  # rows may nest their panels
    return [p for p in out if p.get("type") != "row"]


def dashboard_metrics() -> set[str]:
    """The sample names the dashboard's queries read (``..._total``, ``..._bucket`` as written)."""
    dashboard = json.loads(DASHBOARD.read_text())
    return {m for p in _panels(dashboard) for t in p["targets"] for m in expr_metrics(t["expr"])}


def test_the_dashboard_loads_and_has_panels_for_every_role() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    panels = _panels(dashboard)
    assert dashboard["uid"] and dashboard["title"]
    ids = [p["id"] for p in dashboard["panels"]] + [p["id"] for r in dashboard["panels"] for p in r.get("panels", [])]
    assert len(ids) == len(set(ids)), "panel ids are unique"
    for p in panels:
        assert p["targets"] and all(METRIC.search(t["expr"]) for t in p["targets"]), p["title"]
        assert p["datasource"]["uid"] == "${datasource}"
    names = dashboard_metrics()
    for role in ("streamrec_shard_", "streamrec_trainer_", "streamrec_request_seconds"):
        assert any(n.startswith(role) for n in names), role
    assert {"process_resident_memory_bytes", "streamrec_trainer_rejected_records_total"} <= names
    # keys/s, rows, bytes, refusals; samples/s, lag, pass and commit times, AUC
    assert {"streamrec_shard_pulled_keys_total", "streamrec_shard_pushed_keys_total", "streamrec_shard_table_rows",
            "streamrec_shard_table_bytes", "streamrec_shard_refused_requests_total",
            "streamrec_trainer_records_trained_total", "streamrec_trainer_consumer_lag_records",
            "streamrec_trainer_last_pass_seconds", "streamrec_trainer_commit_stall_seconds",
            "streamrec_trainer_last_pass_auc"} <= names
    # the disk tier: rows and bytes per tier, hit rate, moves, in-place updates, disk reads and refusals
    assert {"streamrec_shard_tier_rows", "streamrec_shard_tier_bytes", "streamrec_shard_tier_lookups_total",
            "streamrec_shard_tier_moved_rows_total", "streamrec_shard_tier_disk_reads_total",
            "streamrec_shard_tier_disk_updates_total", "streamrec_shard_tier_disk_full_total"} <= names


def _produce(bootstrap: str) -> dict[str, Any]:
    topic = f"t-{uuid.uuid4().hex[:10]}"
    kafka = {"topic": topic, "dead_letter_topic": f"{topic}.dead", "group_id": f"g-{topic}", "partitions": 1,
             "batch_size": 250, "batch_timeout_ms": 500}
    config = KafkaConfig(**kafka)
    options = client_options(config, [bootstrap])
    ensure_topics(config, options)
    with RecordProducer(config, options) as producer:
        producer.send_all(json_lines(PlantedModel(seed=4).sample(RECORDS)))
    return kafka


def _job_yaml(tmp: Path, kafka: dict[str, Any]) -> Path:
    slots = [{"name": "user_id", "tower": "user"}, {"name": "item_id", "tower": "item"},
             {"name": "C3", "tower": "user"}]
    data = {"model": {"type": "two_tower", "slots": slots, "embedding_dim": 4, "mlp": [8], "tower_dim": 4, "seed": 2},
            "records": generated_json_schema().model_dump(mode="json"), "kafka": kafka,
            "passes": {"records": 500, "base_every": 2, "keep": 3}, "batch_size": 128,
            "checkpoint_dir": str(tmp / "checkpoints"), "export_dir": str(tmp / "exports")}
    path = tmp / "job.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@contextlib.contextmanager
def _trainer(tmp: Path, job: Path, ps_yaml: Path, endpoint: str, bootstrap: str):
    (port,) = free_ports(1)
    spec = ClusterSpec(role="worker", rank=0, shard_endpoints=(endpoint,), num_workers=1, mode="async",
                       ps_config=str(ps_yaml))
    log = tmp / "trainer.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen([sys.executable, "-m", "cli", "train", "--config", str(job), "--bootstrap",
                                 bootstrap, "--metrics-port", str(port)], cwd=REPO, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True,
                                env={**os.environ, "OMP_NUM_THREADS": "1", **cluster_env(spec)})
    try:
        yield proc, f"http://127.0.0.1:{port}/metrics", log
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@pytest.mark.process
def test_every_metric_the_dashboard_queries_is_exported_by_a_role(broker, tmp_path: Path) -> None:
    deadline = time.monotonic() + 270  # under pytest's 300 s: a loaded machine trains slowly; nothing here is timed
    wanted = dashboard_metrics() | alert_metrics()
    job = _job_yaml(tmp_path, _produce(broker.bootstrap))
    config = load_job_config(job)
    ps_yaml = tmp_path / "ps.yaml"
    # a budget (streamrec_shard_table_max_bytes is exported), and a disk tier under it for one table (the
    # streamrec_shard_tier_* families exist only for tables that have one)
    tables = list(config.model.table_configs())
    tables[0] = tables[0].model_copy(update={"tier": TierConfig(disk=DiskTierConfig(path=str(tmp_path / "tier")))})
    ps = PSConfig(tables=tables, client=ClientConfig(timeout_s=30.0, retries=3), shard={"max_bytes": 1 << 30})
    ps_yaml.write_text(yaml.safe_dump(ps.model_dump(mode="json")))
    settings = ServiceSettings(exports_dir=config.export_dir, poll_seconds=0.5)
    with shard_with_metrics(tmp_path, ps_yaml) as shard, \
            _trainer(tmp_path, job, ps_yaml, shard.endpoint, broker.bootstrap) as (trainer, trainer_url, log), \
            TestClient(create_app(settings)) as service:
        wait_scrape(trainer_url, trainer, log, timeout_s=deadline - time.monotonic())
        with PSClient([shard.endpoint], config=ClientConfig(timeout_s=30.0, retries=0)) as client, \
                pytest.raises(NotFound):
            client.wait(client.pull("no_such_table", np.arange(3, dtype=np.uint64)))  # a refused request
        exported: dict[str, set[str]] = {}
        while True:
            service.get("/v1/embeddings/no_such_slot/1")  # a request and an error (no bundle yet, or no such slot)
            pages = {"shard": scrape(shard.metrics_url), "trainer": scrape(trainer_url),
                     "service": service.get("/metrics").text}
            exported = {role: {name for name, _ in samples(text)} for role, text in pages.items()}
            missing = wanted - set().union(*exported.values())
            if not missing:
                break
            if trainer.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"not exported by any role: {sorted(missing)}; trainer exit {trainer.poll()}, "
                                     f"log: {log.read_text(errors='replace')[-3000:]}")
            time.sleep(1.0)
    # every role's own metrics come from that role
    assert all(n in exported["shard"] for n in wanted if n.startswith("streamrec_shard_"))
    assert all(n in exported["trainer"] for n in wanted if n.startswith("streamrec_trainer_"))
    assert all(n in exported["service"] for n in wanted if n.startswith(("streamrec_request_", "streamrec_bundle_")))
    for role, names in exported.items():
        assert {"process_start_time_seconds", "process_resident_memory_bytes", "streamrec_build_info"} <= names, role
        assert_help_explains(pages[role])
    trained = {name: v for (name, _), v in samples(pages["trainer"]).items()}
    assert 0 < trained["streamrec_trainer_records_trained_total"] <= RECORDS
    assert 0.0 <= trained["streamrec_trainer_last_pass_auc"] <= 1.0 and trained["streamrec_trainer_pass"] >= 1
    assert trained["streamrec_trainer_consumer_lag_records"] >= 0 and trained["streamrec_trainer_last_pass_seconds"] > 0

