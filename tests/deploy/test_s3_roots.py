"""Checkpoint and export roots on S3 (a real moto server process), with no shared filesystem:
every shard, trainer and the service runs in its own working directory (cwd, TMPDIR and, for
shards, --checkpoint-dir), and all they share is the bucket. A pass commits (manifest last,
checksums verified), a job restarted on new, empty shards and workers recovers from it and
trains on, and the service applies the bundles it reads from the bucket."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from core.errors import Unavailable
from exports import bundle
from launcher.launch import free_ports
from logrecords.generator import PlantedModel
from logrecords.sample_encoding import criteo_lines
from ps.client import PSClient
from ps.cluster import ClusterSpec, cluster_env
from ps.ps_config import ClientConfig, PSConfig
from stores.store import open_store
from streaming.connection import client_options
from streaming.kafka_config import KafkaConfig
from streaming.producer import RecordProducer
from streaming.topics import ensure_topics
from tests.s3_server import aws_env, new_bucket, s3_server
from trainer import checkpoints
from trainer.job_config import load_job_config

pytestmark = pytest.mark.process

REPO = Path(__file__).resolve().parents[2]
RECORDS = 2000
MORE = 600
TOKEN = "s3-roots-test-token"


class Roles:
    """Role processes, each in its own directory; all killed (process groups) in teardown."""

    def __init__(self, tmp: Path, env: dict[str, str]) -> None:
        self.tmp, self.env = tmp, env
        self.procs: list[tuple[subprocess.Popen, Path]] = []

    def start(self, name: str, argv: list[str], files: dict[str, Any], env: dict[str, str] | None = None
              ) -> tuple[subprocess.Popen, Path]:
        home = self.tmp / name
        (home / "tmp").mkdir(parents=True)
        for fname, content in files.items():  # every role reads its own copy of its config
            (home / fname).write_text(yaml.safe_dump(content))
        log = open(home / "log", "wb")  # noqa: SIM115 - owned by the child's lifetime
        p = subprocess.Popen([sys.executable, "-m", "cli", *argv], cwd=home, stdout=log,
                             stderr=subprocess.STDOUT, start_new_session=True,
                             env={**os.environ, **self.env, "PYTHONPATH": str(REPO), "TMPDIR": str(home / "tmp"),
                                  "OMP_NUM_THREADS": "1", **(env or {})})
        self.procs.append((p, home))
        return p, home

    def kill_all(self) -> None:
        for p, _ in self.procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()


@pytest.fixture
def s3_env(tmp_path: Path) -> Iterator[dict[str, str]]:
    with s3_server(tmp_path) as env, aws_env(env):
        yield env


@pytest.fixture
def roles(tmp_path: Path, s3_env: dict[str, str]) -> Iterator[Roles]:
    r = Roles(tmp_path, s3_env)
    yield r
    r.kill_all()


def _produce(kafka: dict[str, Any], bootstrap: str, n: int, seed: int) -> None:
    config = KafkaConfig(**kafka)
    options = client_options(config, [bootstrap])
    ensure_topics(config, options)
    with RecordProducer(config, options) as producer:
        producer.send_all(criteo_lines(PlantedModel(seed=seed).sample(n)))


def _run_job(roles: Roles, run: str, job: dict[str, Any], ps: dict[str, Any], bootstrap: str) -> list[str]:
    """Two fresh shards and two fresh workers, each in a new directory; returns the shards'
    ``restored_from`` once the workers are done (the stream ran dry)."""
    ports = free_ports(2)
    endpoints = tuple(f"tcp://127.0.0.1:{p}" for p in ports)
    for i, port in enumerate(ports):
        roles.start(f"{run}-shard-{i}", ["shard", "--config", "ps.yaml", "--index", str(i), "--port", str(port),
                                         "--checkpoint-dir", "own-checkpoints"], {"ps.yaml": ps})
    with PSClient(endpoints, config=ClientConfig(timeout_s=0.5, retries=0)) as client:
        deadline = time.monotonic() + 60
        while True:
            try:
                client.admin.health()
                break
            except Unavailable:
                assert time.monotonic() < deadline, "shards did not start"
        workers = []
        for rank in range(2):
            spec = ClusterSpec(role="worker", rank=rank, shard_endpoints=endpoints, num_workers=2,
                               ps_config="ps.yaml")
            workers.append(roles.start(f"{run}-worker-{rank}", ["train", "--config", "job.yaml", "--bootstrap",
                                                                bootstrap, "--max-idle-s", "4"],
                                       {"job.yaml": job, "ps.yaml": ps}, env=cluster_env(spec)))
        for p, home in workers:
            assert p.wait(timeout=180) == 0, (home / "log").read_text()[-3000:]
        return [s["restored_from"] for s in client.admin.stats()]


def test_shards_trainers_and_service_share_only_an_s3_bucket(roles: Roles, broker, tmp_path: Path) -> None:
    bucket = new_bucket()
    ck, ex = f"s3://{bucket}/checkpoints", f"s3://{bucket}/exports"
    topic = f"s3roots-{time.monotonic_ns()}"
    kafka = {"topic": topic, "dead_letter_topic": f"{topic}.dead", "partitions": 2, "batch_size": 250,
             "batch_timeout_ms": 200}
    job = {"model": {"type": "wide_deep", "slots": [{"name": f"C{i}"} for i in range(1, 27)], "embedding_dim": 4,
                     "mlp": [8]},
           "kafka": kafka, "passes": {"records": 700, "base_every": 2}, "checkpoint_dir": ck, "export_dir": ex}
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    ps = PSConfig(tables=load_job_config(tmp_path / "job.yaml").model.table_configs()).model_dump(mode="json")
    _produce(kafka, broker.bootstrap, RECORDS, seed=11)

    restored = _run_job(roles, "first", job, ps, broker.bootstrap)
    assert restored == [None, None]  # a first run: nothing to restore
    done = checkpoints.complete_passes(ck)
    assert done, "no pass committed"
    first = checkpoints.read_pass(ck, done[-1])  # every file's size and CRC-32C checked against the manifest
    assert first["records_total"] == RECORDS and sum(first["offsets"].values()) == RECORDS
    assert len(first["shard_modes"]) == 2 and {"worker-0.arrays", "worker-1.json", "shard-1/shard.json"} <= set(
        first["files"])
    store = open_store(ck)
    assert "shard.json" in store.list(f"{checkpoints.pass_name(done[-1])}/shard-0")
    for _, home in roles.procs:  # nothing of a pass or a bundle was written to a role's own disk
        written = [p for p in home.rglob("*") if p.is_file() and p.name not in ("log", "job.yaml", "ps.yaml")]
        assert not [p for p in written if p.suffix in (".arrays", ".rows", ".json") or "pass-" in str(p)], written
    versions = bundle.list_versions(ex)
    assert versions, "no bundle exported"

    # A restarted job: new shards and workers in new, empty directories recover from the bucket.
    _produce(kafka, broker.bootstrap, MORE, seed=12)
    restored = _run_job(roles, "second", job, ps, broker.bootstrap)
    assert all(r is not None and r.startswith(f"{ck}/{checkpoints.pass_name(done[-1])}/shard-") for r in restored), \
        restored
    again = checkpoints.complete_passes(ck)
    last = checkpoints.read_pass(ck, again[-1])
    assert again[-1] > done[-1] and last["records_total"] == RECORDS + MORE  # went on from the pass, no re-reads
    assert sum(last["offsets"].values()) == RECORDS + MORE

    # The service, in its own directory, serves the newest bundle it pulled from the bucket.
    newest = bundle.list_versions(ex)[-1]
    (port,) = free_ports(1)
    service, home = roles.start("service", ["serve", "--config", "service.yaml", "--port", str(port)],
                                {"service.yaml": {"exports_dir": ex, "poll_seconds": 0.2, "index": {"kind": "flat"}}},
                                env={"STREAMREC_ADMIN_TOKEN": TOKEN})
    deadline = time.monotonic() + 90
    ready: dict[str, Any] = {}
    while ready.get("version") != newest:
        assert service.poll() is None, (home / "log").read_text()[-3000:]
        assert time.monotonic() < deadline, f"service at {ready}, bundle {newest} in the bucket"
        with contextlib.suppress(OSError, ValueError), \
                urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as r:
            ready = json.loads(r.read())
        time.sleep(0.3)
    assert list((home / "tmp").glob("streamrec-stage-*/*/bundle.json"))  # pulled into its own staging dir
