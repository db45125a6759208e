"""The processes of one `streamrec up` run: its own roles (the record source, the service), each
a :class:`launcher.role_process.RoleProcess`, and the shards and trainers, run by a
:class:`launcher.launch.Launcher` in a thread of this process.

Every role is supervised the way Kubernetes would (:mod:`launcher.restart_policy`, ``up.restart``): a
dead role is started again after a back-off, a bounded number of times per window. The launcher
does it for the shards and trainers (and stops them); :meth:`UpRoles.tend` for `up`'s own roles,
from the thread that started them (their parent-death signal follows it). A replay that reached
the end of its file has finished; a role past its restart budget fails the run.

Two deaths fail the run at once instead: a service that could not listen on its port (taken by
another process: restarting cannot help), and the embedded Kafka broker's (its topics live in
its memory, so a new broker would start empty under producers and consumers that counted on
the old offsets; the next `up` resumes from the last committed pass).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING

from launcher.launch import Launcher, LaunchSpec
from launcher.restart_policy import RestartPolicy, Supervised, Tended
from launcher.role_process import RoleProcess
from ps.auth import read_secret

if TYPE_CHECKING:
    from ps.client import PSClient
    from streaming.broker import EmbeddedBroker

_BIND_FAILED = b"address already in use"  # what a server's failed bind says (uvicorn, tansu: the OS's message)


class ClusterThread:
    """A :class:`Launcher` running the shards and trainers in a daemon thread (from :meth:`start`;
    the shards' ports are picked before, :attr:`shard_endpoints`)."""

    def __init__(self, spec: LaunchSpec, *, out: IO[str] = sys.stderr) -> None:
        self.launcher = Launcher(spec, out=out)
        self.exit_code: int | None = None  # the launcher's, once it returned
        self._thread = threading.Thread(target=self._run, name="launcher", daemon=True)

    @property
    def shard_endpoints(self) -> list[str]:
        """Where the shards will listen (known before they start)."""
        return [f"tcp://{self.launcher.spec.host}:{port}" for port in self.launcher.ports]

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        self.exit_code = self.launcher.run()

    def alive(self) -> bool:
        return self._thread.is_alive()

    @property
    def started(self) -> bool:
        return self._thread.ident is not None

    def shard_client(self) -> PSClient | None:
        """A client of the shards once they all answer; None if the launcher gave up first."""
        from ps.client import PSClient
        from ps.ps_config import ClientConfig

        while not self.launcher.endpoints:
            if not self.alive():
                return None  # the shards never came up: UpRoles.tend() says why
            time.sleep(0.1)
        secret_file = self.launcher.spec.secret_file
        return PSClient(self.launcher.endpoints, config=ClientConfig(timeout_s=1.0, retries=0),
                        secret=read_secret(secret_file) if secret_file is not None else None)

    def stop(self, *, timeout_s: float) -> None:
        """Stop the trainers and shards (the launcher does it) and wait up to ``timeout_s``."""
        self.launcher.stop()
        if self.started:
            self._thread.join(timeout=timeout_s)


class UpRoles:
    """The roles of one run: ``own`` started here, logging under ``log_dir`` and restarted under
    ``restart``, and the launcher's once :meth:`launch` was called."""

    def __init__(self, log_dir: Path, *, restart: RestartPolicy) -> None:
        self.log_dir = log_dir
        self.restart = restart
        self.own: list[RoleProcess] = []
        self._supervised: list[Supervised] = []
        self._ports: dict[str, int] = {}  # role name -> the port it listens on
        self.cluster: ClusterThread | None = None
        self.broker: EmbeddedBroker | None = None  # the embedded broker, when `up` started it
        self._renew: dict[str, str] = {}  # role name -> why it starts again at the next tend()
        self._renew_lock = threading.Lock()

    def start(self, name: str, argv: list[str], *, env: Mapping[str, str], port: int | None = None) -> RoleProcess:
        """Start role ``name``; ``port``: the one it listens on (a failed bind there fails the run)."""
        role = RoleProcess(name, argv, env, self.log_dir / f"{name}.log")
        role.start()
        self.own.append(role)
        self._supervised.append(Supervised(role, self.restart, finished_ok=name == "replay"))
        if port is not None:
            self._ports[name] = port
        return role

    def renew(self, name: str, why: str) -> None:
        """Have own role ``name`` started again by the next :meth:`tend` (its configuration changed;
        ``why`` says how); from any thread: the role is restarted by the thread that started it."""
        with self._renew_lock:
            self._renew[name] = why

    def plan(self, spec: LaunchSpec, *, out: IO[str]) -> ClusterThread:
        """The shards and trainers of ``spec``, their ports picked; started by :meth:`launch`."""
        self.cluster = ClusterThread(spec, out=out)
        return self.cluster

    def launch(self) -> None:
        assert self.cluster is not None, "plan() first"
        self.cluster.start()

    def named(self, *names: str) -> list[RoleProcess]:
        return [r for r in self.own if r.name in names]

    def states(self) -> dict[str, str]:
        """Role name -> ``starting`` / ``running`` / ``exited N``, own roles first."""
        procs = list(self.own)
        if self.cluster is not None:
            procs += self.cluster.launcher.roles()
        return {role.name: role.state() for role in procs}

    def tend(self, say: Callable[[str], None]) -> str | None:
        """Restart own roles that died (when due); why the system cannot go on, or None."""
        if self.cluster is not None and self.cluster.started and not self.cluster.alive():
            return f"shards/trainers stopped (exit {self.cluster.exit_code}); see {self.log_dir}"
        broker = self.broker
        if broker is not None and broker.process is not None and (code := broker.process.poll()) is not None:
            return (f"the embedded Kafka broker died (exit {code}); its topics lived in its memory, so the stream "
                    f"cannot go on: stopping (the next start resumes from the last committed pass); "
                    f"see {broker.log_path or self.log_dir}")
        with self._renew_lock:
            renew, self._renew = self._renew, {}
        for sup in self._supervised:
            if (why := renew.get(sup.role.name)) is not None:
                say(f"{sup.role.name} starts again: {why}")
                sup.renew()
            if (port := self._ports.get(sup.role.name)) is not None and _bind_failed(sup.role):
                return (f"port {port} is in use: {sup.role.name} could not listen on it (another process holds it; "
                        f"stop that one or pick another --port); see {sup.role.log_path}")
            if sup.tend(say) is Tended.GAVE_UP:
                return f"{sup.role.name} exited {sup.role.exit_codes[-1]} too often; see {sup.role.log_path}"
        return None


def _bind_failed(role: RoleProcess) -> bool:
    """The role exited and its log, since its last start, says its port was taken."""
    return role.exit_code() is not None and _BIND_FAILED in role.run_log_tail().lower()
