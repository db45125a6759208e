"""Run a parameter-server job locally: N shard processes and M worker processes.

Like Paddle's ``fleetrun --server_num --trainer_num``: shards get free loopback ports, each
role writes ``<log_dir>/server.<i>.log`` or ``worker.<i>.log``, and workers find the shards
through the ``STREAMREC_*`` variables of :mod:`ps.cluster`. A shard that dies is
restarted on the same port from its latest checkpoint, up to ``max_restart`` times. Unlike
fleetrun, the job fails (non-zero exit) when any worker fails or a shard stays dead; it
succeeds when every worker exits 0, and then the shards are stopped.

With ``LaunchSpec.restart`` (``streamrec up``) the job is supervised the way Kubernetes runs
it instead: a dead shard or worker is restarted under that :class:`launcher.restart_policy.RestartPolicy`
(back-off, a budget per window), a worker that exits 0 has finished, and the job fails only
when a role exhausts its budget. Workers then claim leased ranks (``rank_lease_ttl_s``), so a
restarted worker takes its predecessor's rank and everyone regroups from the last complete
pass, as pods of a Deployment do.

Roles die with this process (:mod:`core.processes`): they are started and restarted by the
thread that runs :meth:`Launcher.run`, which stops them all before it returns: the workers
with SIGTERM and ``stop_grace_s`` to finish, then the shards.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Literal

from core.errors import StreamrecError, Unavailable
from core.fork_server import DEFAULT_START_METHOD, ForkServer, StartMethod
from core.ports import free_ports
from launcher.restart_policy import RestartPolicy, Supervised, Tended, restarts_ever
from launcher.role_process import RoleProcess
from ps.auth import read_secret
from ps.client import PSClient
from ps.cluster import ClusterSpec, Mode, cluster_env
from ps.ps_config import ClientConfig

log = logging.getLogger(__name__)
_POLL_S = 0.1
_STOP_GRACE_S = 5.0
_STARTUP_ATTEMPTS = 3
_LISTEN_POLL_S = 0.02
_TCP_LISTEN = "0A"  # a listening socket's state in /proc/net/tcp

THREAD_LIMIT_VARS: tuple[str, ...] = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                                      "NUMBA_NUM_THREADS")
"""The variables that cap a process's compute threads: OpenMP, OpenBLAS and MKL (numpy's BLAS)
and numba's threading layer. Several shards and workers on one machine share few cores, so
each role gets few threads; more only contend (see :mod:`launcher.file_job` for a measurement).
numba's limit only matters to ``parallel=True`` kernels, which streamrec has none of today."""


def thread_limits(threads: int) -> dict[str, str]:
    """Every :data:`THREAD_LIMIT_VARS` set to ``threads``: an ``env`` for :class:`LaunchSpec`."""
    return {var: str(threads) for var in THREAD_LIMIT_VARS}


@dataclass(frozen=True)
class LaunchSpec:
    """What to launch. Every role inherits this process's environment, then ``env``, then the
    ``STREAMREC_*`` cluster variables (so ``env`` cannot redirect a role to other shards)."""

    servers: int
    workers: int
    command: tuple[str, ...]
    ps_config: Path
    log_dir: Path
    checkpoint_dir: Path
    max_restart: int = 0
    mode: Mode = "async"
    geo_steps: int = 10
    host: str = "127.0.0.1"
    secret_file: Path | None = None
    startup_timeout_s: float = 60.0
    env: Mapping[str, str] = field(default_factory=dict)  # extra environment of every role (over ours)
    restart: RestartPolicy | None = None  # set: supervise shards and workers (module docstring)
    rank_lease_ttl_s: float | None = None  # set: workers claim leased ranks (STREAMREC_RANK=auto)
    stop_grace_s: float = 30.0  # a stopped worker's time to finish (the chief's pass being saved) before SIGKILL
    # set: every shard and worker serves /metrics on a free port (`--metrics-port`, which the worker command must take)
    metrics_ports: bool = False
    reserved_ports: tuple[int, ...] = ()  # bound by other processes of the run later (up's API): never drawn here
    start_method: StartMethod = DEFAULT_START_METHOD  # how shards and workers are started (core.fork_server)


class Launcher:
    """Runs one job (:meth:`run`): shards first, then workers, then watches them (module docstring)."""

    def __init__(self, spec: LaunchSpec, *, out: IO[str] = sys.stderr) -> None:
        self.spec = spec
        self.out = out
        self.endpoints: tuple[str, ...] = ()  # set once every shard answers
        self._stop = threading.Event()
        # roles inherit the preloaded modules' settings (thread limits): the server gets the roles' shared env
        self.forker = ForkServer({**os.environ, **spec.env}) if spec.start_method == StartMethod.FORK_SERVER else None
        spec.log_dir.mkdir(parents=True, exist_ok=True)
        spec.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        names = [f"server.{i}" for i in range(spec.servers)] + [f"worker.{i}" for i in range(spec.workers)]
        picked = free_ports(spec.servers + (len(names) if spec.metrics_ports else 0), spec.host,
                            avoid=spec.reserved_ports)
        # role name -> its /metrics port; the shards' are drawn again when the shards start again on other ports
        self.metrics_ports = dict(zip(names, picked[spec.servers:], strict=False))
        self.on_replan: Callable[[], None] | None = None  # told when the shards' ports (and /metrics ports) change
        self._plan_roles(picked[:spec.servers])

    def _plan_roles(self, ports: list[int]) -> None:
        self.ports = ports
        self._endpoints = tuple(f"tcp://{self.spec.host}:{p}" for p in self.ports)
        self.servers = [self._server(i) for i in range(self.spec.servers)]
        self.workers = [self._worker(i) for i in range(self.spec.workers)]

    def roles(self) -> list[RoleProcess]:
        """The shard and worker processes of the job (started or not yet)."""
        return self.servers + self.workers

    def _say(self, text: str) -> None:
        print(f"streamrec launch: {text}", file=self.out, flush=True)
        log.info(text)  # what the console said stays in the launcher's log (up's, under `up`)

    def _cluster(self, role: Literal["server", "worker"], rank: int) -> dict[str, str]:
        s = self.spec
        spec = ClusterSpec(role=role, rank=rank, shard_endpoints=self._endpoints, num_workers=s.workers,
                           mode=s.mode, geo_steps=s.geo_steps, ps_config=str(s.ps_config),
                           secret_file=str(s.secret_file) if s.secret_file else None,
                           checkpoint_dir=str(s.checkpoint_dir),
                           rank_lease_ttl_s=s.rank_lease_ttl_s if role == "worker" else None)
        return {**os.environ, **s.env, **cluster_env(spec)}

    def _server(self, i: int) -> RoleProcess:
        s = self.spec
        argv = [sys.executable, "-m", "cli", "shard", "--config", str(s.ps_config), "--index", str(i),
                "--port", str(self.ports[i]), "--host", s.host, "--checkpoint-dir", str(s.checkpoint_dir)]
        if s.secret_file:
            argv += ["--secret-file", str(s.secret_file)]
        argv += self._metrics_argv(f"server.{i}")
        return RoleProcess(f"server.{i}", argv, self._cluster("server", i), s.log_dir / f"server.{i}.log",
                           forker=self.forker)

    def _worker(self, i: int) -> RoleProcess:
        return RoleProcess(f"worker.{i}", [*self.spec.command, *self._metrics_argv(f"worker.{i}")],
                           self._cluster("worker", i),
                           self.spec.log_dir / f"worker.{i}.log", forker=self.forker)

    def _metrics_argv(self, name: str) -> list[str]:
        port = self.metrics_ports.get(name)
        return [] if port is None else ["--metrics-port", str(port)]

    def _wait_healthy(self) -> None:
        s = self.spec
        secret = read_secret(s.secret_file) if s.secret_file else None
        deadline = time.monotonic() + s.startup_timeout_s
        while True:
            dead = [r.name for r in self.servers if r.poll() is not None]
            if dead:
                raise Unavailable(f"{', '.join(dead)} exited during startup; see {s.log_dir}")
            if time.monotonic() > deadline:
                raise Unavailable(f"shards not healthy after {s.startup_timeout_s:g}s; see {s.log_dir}")
            # Asked only once every port listens: a request queued for a shard not listening yet would
            # reach it once it binds, signed before it started, and be refused there (a shard that
            # starts quickly binds within the probe's timeout). A client per attempt for the same reason.
            if not _listening(self.ports):
                time.sleep(_LISTEN_POLL_S)
                continue
            with PSClient(self._endpoints, config=ClientConfig(timeout_s=0.5, retries=0), secret=secret) as client:
                try:
                    client.admin.health()
                    return
                except Unavailable:
                    pass  # not answering yet: asked again

    def run(self) -> int:
        """Run the job; 0 when every worker exited 0, else 1."""
        try:
            self._start_shards()
            self._say(f"{len(self.servers)} shards up at {','.join(self.endpoints)}; logs in {self.spec.log_dir}")
            for role in self.workers:
                role.start()
            return self._monitor()
        except StreamrecError as err:
            self._say(f"failed: {err.message}")
            return 1
        finally:
            self._shutdown()

    def _start_shards(self) -> None:
        """Start the shards; a port taken between picking and binding (a busy machine) means new ports."""
        for attempt in range(1, _STARTUP_ATTEMPTS + 1):
            for role in self.servers:
                role.start()
            try:
                self._wait_healthy()
                self.endpoints = self._endpoints
                return
            except Unavailable as err:
                if attempt == _STARTUP_ATTEMPTS:
                    raise
                self._say(f"{err.message}; starting the shards again on other ports ({attempt}/{_STARTUP_ATTEMPTS})")
                for role in self.servers:
                    role.kill()
                    if role.proc is not None:
                        role.proc.wait()
                    role.close_log()
                self._replan_shards()

    def _replan_shards(self) -> None:
        """New ports for the shards and their /metrics (the taken port may have been either), none
        among the workers' /metrics ports or the reserved ones."""
        s = self.spec
        shards = [f"server.{i}" for i in range(s.servers)]
        workers = {name: port for name, port in self.metrics_ports.items() if name not in shards}
        picked = free_ports(s.servers + (s.servers if s.metrics_ports else 0), s.host,
                            avoid=set(workers.values()) | set(s.reserved_ports))
        self.metrics_ports = {**dict(zip(shards, picked[s.servers:], strict=False)), **workers}
        self._plan_roles(picked[:s.servers])
        if self.on_replan is not None:
            self.on_replan()

    def stop(self) -> None:
        """Ask a running ``run()`` (in another thread) to end the job: it returns 0 and stops every role."""
        self._stop.set()

    def _monitor(self) -> int:
        policy = self.spec.restart
        shards = [Supervised(r, policy or restarts_ever(self.spec.max_restart)) for r in self.servers]
        workers = [Supervised(r, policy, finished_ok=True) for r in self.workers] if policy is not None else []
        while True:
            if self._stop.is_set():
                self._say("stopping on request")
                return 0
            tended = [s.tend(self._say) for s in shards + workers]
            if Tended.GAVE_UP in tended:
                self._say(f"failing the job; see {self.spec.log_dir}")
                return 1
            if workers:
                if all(t is Tended.FINISHED for t in tended[len(shards):]):
                    self._say(f"all {len(self.workers)} workers finished")
                    return 0
                time.sleep(_POLL_S)
                continue
            codes = [w.poll() for w in self.workers]
            failed = [(w.name, c) for w, c in zip(self.workers, codes, strict=True) if c not in (None, 0)]
            if failed:
                self._say("failed: " + ", ".join(f"{n} exited {c}" for n, c in failed) + f"; see {self.spec.log_dir}")
                return 1
            if all(c == 0 for c in codes):
                self._say(f"all {len(self.workers)} workers finished")
                return 0
            time.sleep(_POLL_S)

    def _shutdown(self) -> None:
        """Workers first, on SIGTERM (as Kubernetes stops a pod) with ``stop_grace_s`` to finish:
        the chief completes a pass whose save is being written. The shards after them, since that
        save is theirs. SIGKILL for whatever outlives its grace."""
        _stop(self.workers, signal.SIGTERM, self.spec.stop_grace_s)
        _stop(self.servers, signal.SIGTERM, _STOP_GRACE_S)
        if self.forker is not None:
            self.forker.close()


def _listening(ports: list[int]) -> bool:
    """Every port has a listening TCP socket on this machine (``/proc/net/tcp*``, which asks the
    shards nothing); True where those files cannot be read, so the probe goes ahead there."""
    listening: set[int] = set()
    try:
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            with open(table) as f:
                next(f)  # the header
                for line in f:
                    local, _, state = line.split()[1:4]
                    if state == _TCP_LISTEN:
                        listening.add(int(local.rsplit(":", 1)[1], 16))
    except (OSError, ValueError, IndexError, StopIteration):
        return True
    return listening.issuperset(ports)


def _stop(roles: list[RoleProcess], sig: int, grace_s: float) -> None:
    """Send ``sig`` to every role, wait up to ``grace_s`` for them all, then kill the rest."""
    for role in roles:
        role.kill(sig)
    deadline = time.monotonic() + grace_s
    for role in roles:
        if role.proc is not None and role.wait(max(0.0, deadline - time.monotonic())) is None:
            role.dump_stacks()
            role.kill()
            role.proc.wait()
        role.close_log()
