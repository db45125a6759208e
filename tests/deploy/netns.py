"""Network namespaces for multi-host tests: one "host" per namespace, joined by veth pairs to a
bridge in a hub namespace, with 10.x addresses that exist only inside those namespaces (the
machine's own network is never touched).

``with Hosts(subnet) as net: ip = net.add("shard-0"); net.popen("shard-0", argv, ...)``. On
exit (pass, fail or Ctrl-C) every process still inside a namespace is killed and every
namespace deleted, which destroys its veth ends too: nothing is left behind. Namespaces left
by a test process that was itself killed (SIGKILL) are swept by the next run: their names carry
the pid of the test process that made them. Needs root (CI runs as root).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import IO

PREFIX = "srt"  # srt<pid>-<host>
BRIDGE = "br0"


def _ip(*args: str, check: bool = True) -> str:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def namespaces() -> list[str]:
    return [line.split()[0] for line in _ip("netns", "list").splitlines() if line.strip()]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def delete_namespace(name: str) -> None:
    """Kill every process inside ``name`` (all started in it by its test), then delete it."""
    for _ in range(3):
        pids = [int(p) for p in _ip("netns", "pids", name, check=False).split()]
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.2)
    _ip("netns", "del", name, check=False)


def sweep_stale() -> None:
    """Delete namespaces made by test processes that no longer run."""
    for name in namespaces():
        head = name.split("-", 1)[0]
        if head.startswith(PREFIX) and head[len(PREFIX):].isdigit() and not _pid_alive(int(head[len(PREFIX):])):
            delete_namespace(name)


class Hosts:
    """A hub namespace holding a bridge at ``<subnet>.1``, and one namespace per added host."""

    def __init__(self, subnet: str = "10.231.7") -> None:
        self.subnet = subnet
        self.tag = f"{PREFIX}{os.getpid()}"
        self.hub = f"{self.tag}-hub"
        self.made: list[str] = []
        self.hosts: dict[str, tuple[str, str]] = {"hub": (self.hub, f"{subnet}.1")}  # host -> (namespace, address)
        self.procs: list[subprocess.Popen] = []

    def __enter__(self) -> Hosts:
        sweep_stale()
        try:
            self._make(self.hub)
            _ip("-n", self.hub, "link", "add", BRIDGE, "type", "bridge")
            _ip("-n", self.hub, "addr", "add", f"{self.subnet}.1/24", "dev", BRIDGE)
            _ip("-n", self.hub, "link", "set", BRIDGE, "up")
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def _make(self, ns: str) -> None:
        _ip("netns", "add", ns)
        self.made.append(ns)
        _ip("-n", ns, "link", "set", "lo", "up")

    def add(self, host: str) -> str:
        """A new namespace for ``host``, on the bridge; returns its address."""
        n = len(self.hosts)
        ns, address = f"{self.tag}-{host}", f"{self.subnet}.{n + 1}"
        self._make(ns)
        # both ends are made directly inside their namespaces: nothing ever appears in the host's
        _ip("link", "add", f"v{n}", "netns", ns, "type", "veth", "peer", "name", f"h{n}", "netns", self.hub)
        _ip("-n", self.hub, "link", "set", f"h{n}", "master", BRIDGE)
        _ip("-n", self.hub, "link", "set", f"h{n}", "up")
        _ip("-n", ns, "addr", "add", f"{address}/24", "dev", f"v{n}")
        _ip("-n", ns, "link", "set", f"v{n}", "up")
        self.hosts[host] = (ns, address)
        return address

    def address(self, host: str) -> str:
        return self.hosts[host][1]

    def argv(self, host: str, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside ``host``'s namespace (``ip netns exec`` execs it: same pid)."""
        return ["ip", "netns", "exec", self.hosts[host][0], *argv]

    def popen(self, host: str, argv: Sequence[str], *, env: dict[str, str], cwd: Path, log: Path
              ) -> subprocess.Popen:
        out: IO[bytes] = open(log, "ab")  # noqa: SIM115 - owned by the child's lifetime
        p = subprocess.Popen(self.argv(host, argv), env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, start_new_session=True)
        out.close()
        self.procs.append(p)
        return p

    def close(self) -> None:
        for p in self.procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=10)
        for ns in reversed(self.made):
            delete_namespace(ns)
        self.made.clear()
