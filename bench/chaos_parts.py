"""Building blocks of ``bench/chaos.py``: the run's processes, a watcher that verifies every
committed pass and counts records per pass, and a client that probes the service.

Nothing here kills anything; :mod:`bench.chaos` decides what to kill and when.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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


class ServiceProbe:
    """A thread that sends ``/v1/embeddings:lookup`` (of ``values`` of ``slot``) and ``/readyz``
    to ``api`` every ``interval_s`` and keeps every answer's status."""

    def __init__(self, api: str, *, slot: str, values: list[str], interval_s: float = 0.2) -> None:
        self.api = api
        self.body = json.dumps({"slot": slot, "values": values}).encode()
        self.interval_s = interval_s
        self.probes: list[Probe] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="service-probe", daemon=True)

    def start(self) -> ServiceProbe:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

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
