"""Building blocks of ``bench/chaos.py``: the run's processes, a watcher that verifies every
committed pass and counts records per pass, a client that probes the service, and the tools of
the faults that are not signals: the order of the faults, a ballast file that fills a disk, idle
TCP connections held against a port, a line over the broker's limit and a burst of records
stamped years ahead.

Nothing here kills anything; :mod:`bench.chaos` decides what to inject and when.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import random
import selectors
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

from core.errors import StreamrecError
from launcher.up import RUN_TAG_ENV
from trainer import checkpoints

# ----------------------------------------------------------------------------- processes


def _stat_fields(pid: int) -> list[str] | None:
    """``state ppid pgrp session ...`` of a live process, None when it is gone or a zombie."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] == "Z" else fields


def run_pids(run_dir: Path) -> set[int]:
    """Live processes started by the `up` of ``run_dir``: every role carries ``RUN_TAG_ENV`` in its
    environment (children inherit it)."""
    tag = f"{RUN_TAG_ENV}={run_dir}".encode()
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if tag in (entry / "environ").read_bytes().split(b"\0") and _stat_fields(int(entry.name)):
                found.add(int(entry.name))
        except OSError:
            continue  # exited meanwhile
    return found


def process_group(pid: int) -> int | None:
    fields = _stat_fields(pid)
    return int(fields[2]) if fields else None


def group_members(pgids: set[int]) -> set[int]:
    """Live processes in any of the process groups ``pgids``."""
    members = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (pg := process_group(int(entry.name))) is not None and pg in pgids:
            members.add(int(entry.name))
    return members


@dataclass
class ProcessLedger:
    """Every pid and process group seen in one run, so the end can check that none is left."""

    run_dir: Path
    pids: set[int] = field(default_factory=set)
    groups: set[int] = field(default_factory=set)

    def snapshot(self) -> None:
        for pid in run_pids(self.run_dir):
            self.pids.add(pid)
            if (pg := process_group(pid)) is not None:
                self.groups.add(pg)

    def left(self) -> list[int]:
        """Processes still alive after the run: tagged with the run, or in one of its process groups."""
        return sorted(run_pids(self.run_dir) | group_members(self.groups))


# ----------------------------------------------------------------------------- passes


@dataclass
class PassPoint:
    pass_id: int
    created_at: float
    records_total: int
    consumed: int  # sum of the manifest's offsets: records before them in the topic
    auc_total: float | None


@dataclass
class PassWatcher:
    """Reads and verifies (:func:`trainer.checkpoints.read_pass`) every pass as it is committed,
    before pruning removes it, and compares each pass's records with its offsets' advance over
    the pass before it: a pass that counted more records than its offsets moved double-counted
    the difference, one that counted fewer lost it."""

    root: Path
    points: list[PassPoint] = field(default_factory=list)
    verified: int = 0
    corrupt: list[str] = field(default_factory=list)
    pruned_unverified: int = 0  # gone before this watcher could read it (not a failure of the pass)
    duplicates: int = 0
    losses: int = 0
    _seen: set[int] = field(default_factory=set)

    def poll(self) -> None:
        if not self.root.is_dir():
            return
        for pass_id in checkpoints.complete_passes(self.root):
            if pass_id not in self._seen:
                self._check(pass_id)

    def _check(self, pass_id: int) -> None:
        self._seen.add(pass_id)
        try:
            man = checkpoints.read_pass(self.root, pass_id)
        except (StreamrecError, OSError, ValueError) as err:
            if (self.root / checkpoints.pass_name(pass_id) / checkpoints.MANIFEST).exists():
                self.corrupt.append(f"pass {pass_id}: {err}")
            else:
                self.pruned_unverified += 1
            return
        self.verified += 1
        point = PassPoint(pass_id, float(man["created_at"]), int(man["records_total"]),
                          sum(int(o) for o in man.get("offsets", {}).values()),
                          (man.get("progress") or {}).get("auc_total"))
        before = [p for p in self.points if p.pass_id < pass_id]
        prev = before[-1] if before else PassPoint(0, 0.0, 0, 0, None)
        excess = (point.records_total - prev.records_total) - (point.consumed - prev.consumed)
        self.duplicates += max(0, excess)
        self.losses += max(0, -excess)
        self.points.append(point)
        self.points.sort(key=lambda p: p.pass_id)

    @property
    def newest(self) -> PassPoint | None:
        return self.points[-1] if self.points else None


# ----------------------------------------------------------------------------- the service


@dataclass
class Probe:
    t: float  # time.time() when the request was sent
    path: str
    status: int  # HTTP status; 0: no answer (connection refused, timeout)


class Looping:
    """A daemon thread running ``_run`` until :meth:`stop` sets ``_stop``."""

    def __init__(self, name: str) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        raise NotImplementedError


class ServiceProbe(Looping):
    """A thread that sends ``/v1/embeddings:lookup`` (of ``values`` of ``slot``) and ``/readyz``
    to ``api`` every ``interval_s`` and keeps every answer's status."""

    def __init__(self, api: str, *, slot: str, values: list[str], interval_s: float = 0.2) -> None:
        self.api = api
        self.body = json.dumps({"slot": slot, "values": values}).encode()
        self.interval_s = interval_s
        self.probes: list[Probe] = []
        super().__init__("service-probe")

    def _ask(self, path: str, body: bytes | None) -> None:
        t = time.time()
        req = urllib.request.Request(self.api + path, data=body, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=5) as r:
                r.read()
                status = r.status
        except urllib.error.HTTPError as err:
            status = err.code
        except (OSError, urllib.error.URLError):
            status = 0
        self.probes.append(Probe(t, path, status))

    def _run(self) -> None:
        while not self._stop.is_set():
            self._ask("/v1/embeddings:lookup", self.body)
            self._ask("/readyz", None)
            self._stop.wait(self.interval_s)


def service_errors(probes: list[Probe], excused: list[tuple[float, float]]) -> dict[str, Any]:
    """Requests and failures (5xx or no answer), split by whether they fell in an ``excused``
    window (no bundle loaded yet, or the service killed and not yet serving again)."""

    def inside(t: float) -> bool:
        return any(a <= t <= b for a, b in excused)

    out = [p for p in probes if not inside(p.t)]
    failed = [p for p in out if p.status == 0 or p.status >= 500]
    during = [p for p in probes if inside(p.t)]
    return {"requests": len(probes), "requests_outside_restarts": len(out), "errors_outside_restarts": len(failed),
            "error_rate_outside_restarts": len(failed) / len(out) if out else None,
            "errors_during_restarts": sum(1 for p in during if p.status == 0 or p.status >= 500),
            "client_errors_4xx": sum(1 for p in probes if 400 <= p.status < 500)}


def first_ready(probes: list[Probe], after: float) -> float | None:
    """When ``/readyz`` first answered 200 after ``after`` (a bundle is loaded)."""
    with contextlib.suppress(StopIteration):
        return next(p.t for p in probes if p.path == "/readyz" and p.status == 200 and p.t >= after)
    return None


# ----------------------------------------------------------------------------- AUC of the runs


def auc_comparison(chaos_auc: float | None, calm_aucs: list[float | None]) -> dict[str, Any]:
    """The chaos run's final AUC against the no-kill runs': the difference from their mean, and
    their spread (max - min, None with one run): how much the AUC moves with no kill at all,
    from timing alone (async steps, mini-batches cut by time, pass boundaries)."""
    known = [a for a in calm_aucs if a is not None]
    mean = sum(known) / len(known) if known else None
    return {"no_kills_aucs": calm_aucs, "no_kills_mean": None if mean is None else round(mean, 4),
            "no_kills_spread": round(max(known) - min(known), 4) if len(known) > 1 else None,
            "difference": None if chaos_auc is None or mean is None else round(chaos_auc - mean, 4)}


# ----------------------------------------------------------------------------- faults

# Faults that restart `up` itself: the embedded broker's log is lost with it, and the replay resumes
# on a new one by taking the pass's offsets as counts of the file's lines.
RESTARTS_UP = ("broker", "up")
# Records put on the topic from outside the replay file: before a restart of `up` they would be
# taken as lines of the file that the resumed replay then leaves out.
FOREIGN_RECORDS = ("future_timestamps",)


def fault_plan(faults: list[str], rng: random.Random) -> list[str]:
    """Each of ``faults`` once in a seeded order, with those of :data:`FOREIGN_RECORDS` after every
    one of :data:`RESTARTS_UP` (see there)."""
    order = list(faults)
    rng.shuffle(order)
    restarts = [i for i, f in enumerate(order) if f in RESTARTS_UP]
    if restarts:
        late = [f for f in order[: restarts[-1]] if f in FOREIGN_RECORDS]
        order = [f for f in order if f not in late]
        last = max(i for i, f in enumerate(order) if f in RESTARTS_UP)
        order[last + 1 : last + 1] = late
    return order


def mount_tmpfs(path: Path, size_mb: int) -> str | None:
    """Mount a tmpfs of ``size_mb`` MiB on ``path`` (made if missing); None when mounted, else why not."""
    path.mkdir(parents=True, exist_ok=True)
    try:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m,mode=0755", "tmpfs", str(path)],
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    return None if done.returncode == 0 else (done.stderr.strip() or f"mount exited {done.returncode}")


def unmount(path: Path) -> None:
    """Unmount ``path``, lazily when something still holds it open."""
    if subprocess.run(["umount", str(path)], capture_output=True, timeout=30).returncode != 0:
        subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=30)


class Ballast:
    """A file that takes every free byte of the file system under ``directory`` until :meth:`free`."""

    CHUNK = 1 << 20

    def __init__(self, directory: Path) -> None:
        self.path = directory / ".chaos-ballast"
        self.bytes = 0

    def fill(self) -> int:
        """Write until the file system says ENOSPC (or EDQUOT); returns the bytes written."""
        block = b"\0" * self.CHUNK
        with open(self.path, "wb", buffering=0) as f:
            size = self.CHUNK
            while size:
                try:
                    self.bytes += f.write(block[:size])
                except OSError as exc:
                    if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                        raise
                    size //= 2  # the last few blocks: take what is left, byte by byte at the end
        return self.bytes

    def free(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()


class IdleConnections(Looping):
    """``n`` TCP connections to ``host:port`` that never send a byte, held by a thread until
    :meth:`stop`; one the server closes is opened again, as an attacker would."""

    def __init__(self, host: str, port: int, n: int) -> None:
        self.host, self.port, self.n = host, port, n
        self.opened = 0
        self.closed_by_server = 0
        self.connect_failures = 0
        self.most_held = 0
        self._socks: dict[int, socket.socket] = {}
        self._sel = selectors.DefaultSelector()
        super().__init__("idle-connections")

    @property
    def held(self) -> int:
        return len(self._socks)

    def stop(self) -> None:
        super().stop()
        for sock in list(self._socks.values()):
            self._drop(sock)
        self._sel.close()

    def _open(self) -> None:
        try:
            sock = socket.create_connection((self.host, self.port), timeout=5)
        except OSError:
            self.connect_failures += 1
            return
        sock.setblocking(False)
        self._socks[sock.fileno()] = sock
        self._sel.register(sock, selectors.EVENT_READ)
        self.opened += 1

    def _drop(self, sock: socket.socket) -> None:
        self._socks.pop(sock.fileno(), None)
        with contextlib.suppress(KeyError, ValueError):
            self._sel.unregister(sock)
        sock.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            while self.held < self.n and not self._stop.is_set():
                before = self.connect_failures
                self._open()
                if self.connect_failures > before:
                    self._stop.wait(0.1)  # a refused connect: the server may be restarting
                    break
            self.most_held = max(self.most_held, self.held)
            for key, _ in self._sel.select(timeout=0.2) if self._socks else ():
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                try:
                    data = sock.recv(4096)
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                if not data:  # closed by the server (or an answer, e.g. a timeout's 408, then closed)
                    self.closed_by_server += 1
                    self._drop(sock)
            if not self._socks:
                self._stop.wait(0.2)


def oversized_line(limit: int) -> bytes:
    """A JSON-lines record (newline included) of ``limit`` + 64 KiB bytes: a valid JSON object the
    broker cannot take in one request."""
    pad = limit + (64 << 10)
    return json.dumps({"label": 0, "user_id": "0", "pad": "x" * pad}).encode() + b"\n"


def far_future_burst(bootstrap: list[str], topic: str, lines: list[bytes], *, years: float) -> int:
    """Produce ``lines`` to ``topic`` with a Kafka timestamp ``years`` ahead of now; the count sent."""
    from kafka import KafkaProducer

    stamp = int((time.time() + years * 365.25 * 86400) * 1000)
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=10)
    try:
        for line in lines:
            producer.send(topic, value=line.rstrip(b"\n"), timestamp_ms=stamp)
        producer.flush(timeout=60)
    finally:
        producer.close(timeout=10)
    return len(lines)


def free_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize
