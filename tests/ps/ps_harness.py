"""Real shard processes for the parameter-server tests, always killed on teardown."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from core.errors import Unavailable
from launcher.launch import free_ports
from ps.client import PSClient
from ps.cluster import ClusterSpec, Mode, cluster_env
from ps.ps_config import ClientConfig

REPO = Path(__file__).resolve().parents[2]
WORKER_SCRIPT = Path(__file__).with_name("worker_process.py")


class Shards:
    def __init__(self, tmp: Path, tables: Sequence[dict[str, Any]], n: int, secret: bytes | None,
                 auth: dict[str, Any] | None = None, shard: dict[str, Any] | None = None,
                 id_rows_tier: dict[str, Any] | None = None) -> None:
        self.config = tmp / "ps.yaml"
        self.config.write_text(yaml.safe_dump({"tables": list(tables), **({"auth": auth} if auth else {}),
                                               **({"shard": shard} if shard else {}),
                                               **({"id_rows_tier": id_rows_tier} if id_rows_tier else {})}))
        self.checkpoints = tmp / "checkpoints"
        self.logs = tmp / "logs"
        self.logs.mkdir(exist_ok=True)
        self.secret_file: Path | None = None
        if secret is not None:
            self.secret_file = tmp / "secret"
            self.secret_file.write_bytes(secret)
        self.ports = free_ports(n)
        self.endpoints = [f"tcp://127.0.0.1:{p}" for p in self.ports]
        self.procs: list[subprocess.Popen | None] = [None] * n
        self.extra: list[subprocess.Popen] = []

    def start(self, i: int) -> None:
        argv = [sys.executable, "-m", "cli", "shard", "--config", str(self.config), "--index", str(i),
                "--port", str(self.ports[i]), "--checkpoint-dir", str(self.checkpoints)]
        if self.secret_file is not None:
            argv += ["--secret-file", str(self.secret_file)]
        log = open(self.logs / f"shard-{i}.log", "ab")  # noqa: SIM115 - owned by the child
        self.procs[i] = subprocess.Popen(argv, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def kill(self, i: int) -> None:
        proc = self.procs[i]
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    def client(self, *, timeout_s: float = 10.0, retries: int = 2) -> PSClient:
        secret = self.secret_file.read_bytes() if self.secret_file else None
        return PSClient(self.endpoints, config=ClientConfig(timeout_s=timeout_s, retries=retries), secret=secret)

    def wait_healthy(self, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        with self.client(timeout_s=0.5, retries=0) as c:
            while True:
                try:
                    c.admin.health()
                    return
                except Unavailable:
                    dead = [i for i, p in enumerate(self.procs) if p is not None and p.poll() is not None]
                    if dead or time.monotonic() > deadline:
                        logs = {i: (self.logs / f"shard-{i}.log").read_text()[-2000:] for i in range(len(self.procs))}
                        raise AssertionError(f"shards not healthy (dead: {dead}); logs: {logs}") from None

    def worker_env(self, rank: int, workers: int, mode: Mode = "async") -> dict[str, str]:
        spec = ClusterSpec(role="worker", rank=rank, shard_endpoints=tuple(self.endpoints), num_workers=workers,
                           mode=mode, ps_config=str(self.config),
                           secret_file=str(self.secret_file) if self.secret_file else None)
        return {**os.environ, **cluster_env(spec)}

    def run_workers(self, workers: int, args: Sequence[str], *, mode: str = "async", timeout_s: float = 120) -> None:
        """Run ``worker_process.py ARGS`` once per rank, concurrently; fail with their output if any fails."""
        procs = []
        for r in range(workers):
            p = subprocess.Popen([sys.executable, str(WORKER_SCRIPT), *args], cwd=REPO,
                                 env=self.worker_env(r, workers, mode), stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, start_new_session=True)
            self.extra.append(p)
            procs.append(p)
        for r, p in enumerate(procs):
            out, _ = p.communicate(timeout=timeout_s)
            assert p.returncode == 0, f"worker {r} exited {p.returncode}:\n{out.decode()[-3000:]}"

    def close(self) -> None:
        for p in [*self.procs, *self.extra]:
            if p is not None and p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


@contextmanager
def shard_processes(tmp: Path, tables: Sequence[dict[str, Any]], n: int = 2, *,
                    secret: bytes | None = None, auth: dict[str, Any] | None = None,
                    shard: dict[str, Any] | None = None,
                    id_rows_tier: dict[str, Any] | None = None) -> Iterator[Shards]:
    """``auth``, ``shard``, ``id_rows_tier``: the PS config's keys of those names (default: their defaults)."""
    shards = Shards(tmp, tables, n, secret, auth, shard, id_rows_tier)
    try:
        for i in range(n):
            shards.start(i)
        for attempt in range(3):  # others' tests pick free ports too: a port may be taken before we bind it
            try:
                shards.wait_healthy()
                break
            except AssertionError:
                logs = [(shards.logs / f"shard-{i}.log").read_text() for i in range(n)]
                clashed = [i for i in range(n) if "Address already in use" in logs[i]]
                if attempt == 2 or not clashed:
                    raise
                for i in clashed:
                    shards.kill(i)
                    (shards.logs / f"shard-{i}.log").unlink()
                    shards.ports[i] = free_ports(1)[0]
                    shards.endpoints[i] = f"tcp://127.0.0.1:{shards.ports[i]}"
                    shards.start(i)
        yield shards
    finally:
        shards.close()
