"""Real processes for the trainer's integration tests: a tansu broker, PS shard processes and
`streamrec train` workers. Every process gets its own process group and is killed in
teardown, pass or fail."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from core.errors import Unavailable
from ps.client import PSClient
from ps.cluster import ClusterSpec, cluster_env
from ps.ps_config import ClientConfig, PSConfig

REPO = Path(__file__).resolve().parents[2]


class Procs:
    """Processes started by a test; ``kill_all`` SIGKILLs their groups."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.procs: list[subprocess.Popen] = []
        self.logs: dict[int, Path] = {}  # pid -> its log file

    def start(self, argv: list[str], *, env: dict[str, str] | None = None, log: str) -> subprocess.Popen:
        path = self.tmp / f"{log}.{len(self.procs)}"
        out = open(path, "ab")  # noqa: SIM115 - owned by the child's lifetime
        p = subprocess.Popen(argv, env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}, cwd=REPO, stdout=out,
                             stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append(p)
        self.logs[p.pid] = path
        return p

    def log_of(self, p: subprocess.Popen) -> str:
        return self.logs[p.pid].read_text(errors="replace")

    @staticmethod
    def kill(p: subprocess.Popen) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
        p.wait()

    def kill_all(self) -> None:
        for p in self.procs:
            self.kill(p)


@pytest.fixture
def procs(tmp_path: Path) -> Iterator[Procs]:
    p = Procs(tmp_path)
    try:
        yield p
    finally:
        p.kill_all()


class Cluster:
    """S shard processes serving ``tables``; ``train(...)`` starts a worker of the streaming job."""

    def __init__(self, procs: Procs, tmp: Path, tables: Any, servers: int = 1) -> None:
        from launcher.launch import free_ports

        self.procs, self.tmp = procs, tmp
        self.ps_yaml = tmp / "ps.yaml"
        # short client timeouts: a restarted shard is found again quickly
        ps = PSConfig(tables=tables, client=ClientConfig(timeout_s=2.0, retries=20))
        self.ps_yaml.write_text(yaml.safe_dump(ps.model_dump(mode="json")))
        self.ports = free_ports(servers)
        self.endpoints = tuple(f"tcp://127.0.0.1:{p}" for p in self.ports)
        self.shards = [self._spawn_shard(i) for i in range(servers)]  # all start at once, then each is awaited
        for i, p in enumerate(self.shards):
            self._until_healthy(i, p)

    def start_shard(self, i: int) -> subprocess.Popen:
        return self._until_healthy(i, self._spawn_shard(i))

    def _spawn_shard(self, i: int) -> subprocess.Popen:
        return self.procs.start([sys.executable, "-m", "cli", "shard", "--config", str(self.ps_yaml),
                                 "--index", str(i), "--port", str(self.ports[i])], log=f"shard-{i}")

    def _until_healthy(self, i: int, p: subprocess.Popen) -> subprocess.Popen:
        deadline = time.monotonic() + 60
        with PSClient([self.endpoints[i]], config=ClientConfig(timeout_s=0.5, retries=0)) as c:
            while True:
                try:
                    c.admin.health()
                    return p
                except Unavailable:
                    if time.monotonic() > deadline or p.poll() is not None:
                        raise

    def stats(self) -> list[dict]:
        """Per shard: pushes applied over all its tables."""
        with PSClient(self.endpoints) as c:
            return [{"pushes": sum(t["pushes"] for t in s["tables"].values())} for s in c.admin.stats()]

    def env(self, rank: int = 0, workers: int = 1, mode: str = "sync") -> dict[str, str]:
        spec = ClusterSpec(role="worker", rank=rank, shard_endpoints=self.endpoints, num_workers=workers,
                           mode=mode, ps_config=str(self.ps_yaml))
        return cluster_env(spec)

    def train(self, job_yaml: Path, bootstrap: str, *, rank: int = 0, workers: int = 1, mode: str = "sync",
              extra: tuple[str, ...] = ("--max-idle-s", "4")) -> subprocess.Popen:
        return self.procs.start([sys.executable, "-m", "cli", "train", "--config", str(job_yaml),
                                 "--bootstrap", bootstrap, *extra], env=self.env(rank, workers, mode),
                                log=f"train-{rank}")


@pytest.fixture
def cluster(procs: Procs, tmp_path: Path) -> Callable[..., Cluster]:
    return lambda tables, servers=1: Cluster(procs, tmp_path, tables, servers)


def topic_name() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"
