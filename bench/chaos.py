"""Chaos soak: does `streamrec up` survive kill -9 of its roles, of its broker and of itself, frozen
processes, a full disk, far-future timestamps, an oversized line and idle connections, without
losing or double-counting a record?

Writes a stream of planted-model events to a file (``--rate`` records/s for the startup
allowance plus the fault window, so the record count is known exactly) and runs it through
``streamrec up --replay`` (2 shards, 2 trainers, the service, the embedded broker, the replay
at ``--rate``, set explicitly: ``up.replay.rate`` and ``--replay-rate``, as a replay is unthrottled
by default), in this one invocation, each in a fresh run directory:

- **chaos**: once a bundle is served and a pass committed, every fault of ``--faults`` (all by
  default) once, in a seeded order (``--seed``), 15-60 s apart (``--min-interval``,
  ``--max-interval``), each waiting until the one before it has recovered; then, until ``--minutes``
  have passed, kill -9 of a random role among the selected ones. The faults:

  - ``shard``, ``chief`` (the holder of rank 0), ``trainer`` (rank 1), ``service``: kill -9 of
    that role; `up`'s supervisor restarts it.
  - ``broker``: kill -9 of the embedded broker; its topics lived in its memory, so `up` must fail
    by itself; it is started again with the same command.
  - ``up``: kill -9 of `up`; its roles must die with it (parent-death signal); it is started again
    with the same command. After either restart the replay must resume from the last committed
    pass (the records are counted across both `up` runs, by the same pass watcher).
  - ``stop_shard``, ``stop_trainer``: SIGSTOP of a random shard or trainer for 30-60 s, then SIGCONT.
  - ``disk_full``: the run directory lives on a tmpfs of ``--tmpfs-mb`` MiB mounted for the run;
    a ballast file fills it to ENOSPC for ``--disk-full-s`` s, then is deleted. If the tmpfs cannot
    be mounted this fault is skipped, saying so, and the run directory is on the ordinary disk.
  - ``future_timestamps``: ``--burst`` planted records produced to the topic with a Kafka
    timestamp ``--years`` ahead (counted as records the trainers must train; after every restart
    of `up` in the plan: :data:`bench.chaos_parts.FOREIGN_RECORDS`).
  - ``oversized_line``: a line over what one produce request carries is in the replayed file,
    a quarter of the way through the fault window; the replay must refuse it and go on, the
    consumers dead-letter it (it is counted as expected, not as lost).
  - ``idle_connections``: ``--idle-connections`` TCP connections that send nothing, held against
    the API for ``--idle-s`` s (one the server closes is opened again).

- **no faults**: the same stream without the oversized line, as long, nothing injected: the
  baseline.

A fault is injected at ``at`` (seconds after `up` started); it is healthy again when its victim is
back (a shard answers HEALTH from a new pid, or the stopped one after SIGCONT; a trainer: every
rank leased by a live pid not the killed one; the service or a restarted `up`: ``/readyz`` answers
200 after it; a held fault: once released) and recovered at the ``created_at`` of the first pass
committed after that with more records than the newest pass at the injection (or, the stream
all trained, once healthy). Recovery time = recovered - injected.

After the window each run waits until the committed offsets reach the end of the stream (or
records stop moving for ``--stall`` s), then stops `up` with SIGINT (it commits a final pass) and
reports:

- records: the file's lines plus the records of the timestamp burst, against the final pass's
  offsets (summed; a replay resumed on a new broker's log counts its offsets after what the last
  pass trained, so they run on across restarts) and ``records_total``. Every pass is read as it
  commits; a pass whose records grew by more than its offsets advanced over the pass before
  double-counted the difference, by less lost it (less the oversized line, dead-lettered). Records
  beyond the final offsets were never trained ("not reached") and count as lost. What the replay
  says it produced is shown too: a sum over its starts, more than the file after a restart of `up`
  (lines produced but not trained are produced again).
- passes whose manifest fails :func:`trainer.checkpoints.read_pass`: every pass is verified as
  it is committed (pruning removes old ones) and those left are verified again at the end.
- served requests: a client thread sends ``/v1/embeddings:lookup`` (the 20 most frequent
  users) and ``/readyz`` every 0.2 s; a failure is a 5xx or no answer. Failures are excused
  before the first bundle and from a kill of the service, the broker or `up` until ``/readyz``
  answers again; not while a process is frozen, the disk is full or connections are held.
- final progressive AUC (the final pass's cumulative ``auc_total``) of both runs; with
  ``--baselines N`` the stream is run N times without faults and the chaos run is compared with
  their mean (the AUC also moves with timing alone).
- processes left after `up` exits (tagged with the run, ``STREAMREC_UP_RUN_DIR``, or in any
  process group the run had), and after each kill -9 of `up`, those that outlived it.

Targets: every fault recovered, 0 lost, 0 double-counted, 0 corrupt passes, 0 processes left,
final AUC within 0.01 of the no-fault run, service error rate < 1% outside restarts. Known limit:
the counts come from the trainers, so a restarted shard that silently rolled back its rows
loses updates, not records; only the AUC can show that.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from bench import REPO
from bench.chaos_parts import (
    Ballast,
    IdleConnections,
    PassWatcher,
    Probe,
    ProcessLedger,
    ServiceProbe,
    auc_comparison,
    far_future_burst,
    fault_plan,
    first_ready,
    mount_tmpfs,
    oversized_line,
    run_pids,
    service_errors,
    unmount,
)
from core.errors import StreamrecError
from launcher.launch import free_ports
from launcher.system_config import load_config, resolve_root
from launcher.up_kafka import TopicEnd
from logrecords.generator import USER_SLOT, PlantedModel
from logrecords.sample_encoding import json_text, write_dataset
from ps.auth import read_secret
from ps.client import PSClient
from ps.ps_config import ClientConfig

KILLS = ("shard", "chief", "trainer", "service")  # kill -9 of a role; repeated at random after the plan
FAULTS = (*KILLS, "broker", "up", "stop_shard", "stop_trainer", "disk_full", "future_timestamps", "oversized_line",
          "idle_connections")
EXCUSED = ("service", "broker", "up")  # the API is down until /readyz answers again
HELD = ("stop_shard", "stop_trainer", "disk_full", "idle_connections")
STARTUP_S = 60.0  # records in the file for `up` to start before the fault window
PER_FAULT_S = 40.0  # what a fault of the plan takes beyond its interval (recovery, holding), to size the stream
AUC_TOLERANCE = 0.01
TARGET_ERROR_RATE = 0.01
_TICK_S = 0.25


def up_config(rate: float, seed: int) -> dict[str, Any]:
    """2 shards, 2 trainers, the replay at ``rate`` records/s: set explicitly (``up.replay.rate``,
    and ``--replay-rate`` on the command line), as a replay is unthrottled by default."""
    up: dict[str, Any] = {"shards": 2, "workers": 2, "generator": {"rate": rate, "seed": seed},
                          "replay": {"rate": rate}}
    return {"kafka": {"partitions": 2, "batch_size": 256, "batch_timeout_ms": 100},
            "service": {"poll_seconds": 0.5}, "up": up}


@dataclass
class Fault:
    name: str  # one of FAULTS
    target: str  # what it hit: "shard.1 pid 123", "1000 connections to :8000", ...
    injected: str  # what was done
    at: float  # time.time() right after the injection
    pid: int | None = None
    release_due: float | None = None  # a held fault: when to release it
    released_at: float | None = None
    healthy_at: float | None = None
    recovered_at: float | None = None  # created_at of the first pass showing progress
    restarted_at: float | None = None  # broker, up: when `up` was started again
    note: str = ""

    @property
    def recovery_s(self) -> float | None:
        return None if self.recovered_at is None else max(0.0, self.recovered_at - self.at)


class Run:
    """One `streamrec up --replay` of the stream; injects ``faults`` in an order drawn from ``rng``
    when it is given."""

    def __init__(self, name: str, stream: Path, records: int, args: argparse.Namespace, rng: random.Random | None,
                 faults: tuple[str, ...] = (), oversized_at: int | None = None):
        self.name, self.stream, self.records, self.args, self.rng = name, stream, records, args, rng
        self.selected = faults if rng is not None else ()
        self.oversized_at = oversized_at  # the file's line number of the oversized line
        self.base = Path(tempfile.mkdtemp(prefix=f"streamrec-chaos-{name}-"))
        self.run_dir = self.base / "run"
        self.log = self.base / "up.log"
        (self.port,) = free_ports(1)
        self.api = f"http://127.0.0.1:{self.port}"
        self.ledger = ProcessLedger(self.run_dir)
        self.faults: list[Fault] = []
        self.skipped: list[str] = []  # faults that could not be injected, each with why
        self.not_injected: list[str] = []  # faults of the plan left when --max-minutes ran out
        self.proc: subprocess.Popen | None = None
        self.endpoints: list[str] = []
        self.log_from = 0  # where the current `up`'s output starts in self.log
        self.injected_records = 0  # records put on the topic besides the file's (the timestamp burst)
        self.left_after_up_kills: list[int] = []
        self.tmpfs = False
        self.ballast: Ballast | None = None
        self.idle: IdleConnections | None = None
        self.started = 0.0
        self.probe: ServiceProbe | None = None

    # ------------------------------------------------------------------ the cluster
    def prepare(self) -> None:
        if "disk_full" not in self.selected:
            return
        why = mount_tmpfs(self.run_dir, self.args.tmpfs_mb)
        if why is None:
            self.tmpfs = True
        else:
            self.skip("disk_full", f"cannot mount a tmpfs on {self.run_dir} ({why}): the run directory is on the "
                                   "ordinary disk and no full disk is tried")

    def skip(self, fault: str, why: str) -> None:
        self.skipped.append(f"{fault}: {why}")
        self.selected = tuple(f for f in self.selected if f != fault)
        print(f"chaos: fault {fault} SKIPPED: {why}", file=sys.stderr, flush=True)

    def start(self) -> None:
        config = self.base / "streamrec.yaml"
        config.write_text(yaml.safe_dump(up_config(self.args.rate, self.args.seed)))
        argv = [sys.executable, "-m", "cli", "up", "--plain", "--config", str(config), "--run-dir",
                str(self.run_dir), "--port", str(self.port), "--replay", str(self.stream), "--replay-format", "json",
                "--replay-rate", f"{self.args.rate:g}"]
        self.log_from = self.log.stat().st_size if self.log.exists() else 0
        self.endpoints = []
        with open(self.log, "ab") as out:  # a restarted `up` writes on after the first one's output
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                         cwd=REPO)
        self.ledger.pids.add(self.proc.pid)
        self.ledger.groups.add(self.proc.pid)

    def up_output(self) -> str:
        with open(self.log, "rb") as f:
            f.seek(self.log_from)
            return f.read().decode(errors="replace")

    def up_alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _ps(self) -> PSClient:
        return PSClient(self.endpoints, config=ClientConfig(timeout_s=1.0, retries=0),
                        secret=read_secret(self.run_dir / "ps-secret"))

    def shard_pids(self) -> list[int] | None:
        if not self.endpoints:
            return None
        try:
            with self._ps() as ps:
                return [int(h["pid"]) for h in ps.admin.health()]
        except StreamrecError:
            return None

    def rank_pids(self) -> dict[int, int] | None:
        """Rank -> pid of its live lease holder (holders are ``<hostname>:<pid>``)."""
        if not self.endpoints:
            return None
        try:
            with self._ps() as ps:
                table = ps.admin.leases()
        except StreamrecError:
            return None
        return {r: int(lease.holder.rsplit(":", 1)[1]) for r, lease in table.leases.items() if lease.expires_in_s > 0}

    def role_pid(self, marker: bytes, *, exact: bool = True) -> int | None:
        """The run's process with ``marker`` as an argument (``exact``) or within one."""
        for pid in sorted(run_pids(self.run_dir)):
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if marker in argv if exact else any(marker in a for a in argv):
                return pid
        return None

    # ------------------------------------------------------------------ the run
    def execute(self) -> dict[str, Any]:
        self.prepare()
        try:
            return self._execute()
        finally:
            if self.tmpfs:
                if (self.run_dir / "logs").is_dir():  # kept: the tmpfs goes
                    shutil.copytree(self.run_dir / "logs", self.base / "run-logs", dirs_exist_ok=True)
                unmount(self.run_dir)

    def _execute(self) -> dict[str, Any]:
        self.start()
        self.started = time.time()
        probe = self.probe = ServiceProbe(self.api, slot="user_id", values=popular_users(self.args.seed)).start()
        watcher = PassWatcher(Path(resolve_root("checkpoints", self.run_dir)))
        topic_total: int | None = None
        try:
            self._wait_started(watcher, probe)
            plan = fault_plan(list(f for f in self.selected if f != "oversized_line"), self.rng) if self.rng else []
            window_end = time.monotonic() + self.args.minutes * 60
            give_up = time.monotonic() + (self.args.max_minutes or float("inf")) * 60
            next_at = time.monotonic() + self._interval()
            stalled_since, last_total = time.monotonic(), -1
            while self.up_alive() or self._restarting():
                self._tick(watcher, probe)
                now = time.monotonic()
                if plan and now > give_up:  # out of time (a stalled system waits out every recovery)
                    self.not_injected, plan, window_end = plan, [], now
                pending = self._pending()
                if self.rng is not None and not pending and now >= next_at and (plan or now < window_end):
                    kills = [k for k in KILLS if k in self.selected]
                    name = plan[0] if plan else (self.rng.choice(kills) if kills else None)
                    if name is None:
                        window_end = now
                    elif self._inject(name, watcher):
                        if plan:
                            plan.pop(0)
                        next_at = now + self._interval()
                if plan or now < window_end or self._pending():
                    continue
                newest = watcher.newest
                if newest is not None and newest.consumed >= self.expected:
                    break  # every record is behind the committed offsets
                total = newest.records_total if newest else 0
                if total != last_total:
                    stalled_since, last_total = now, total
                elif now - stalled_since > self.args.stall:
                    break
            topic_total = self._topic_end()
        finally:
            probe.stop()
            self._release_all()
            up_exit = self.stop()
        time.sleep(1.0)
        watcher.poll()  # the final pass, committed on the way out
        left = self.ledger.left()
        counts = re.findall(r"^produced (\d+) records", self.role_log("replay"), re.M)
        produced = sum(int(n) for n in counts) if counts else None  # None: the replay never finished
        return self.report(watcher, probe, produced, up_exit, left) | {"topic_end_offsets": topic_total}

    @property
    def expected(self) -> int:
        return self.records + self.injected_records

    def _topic_end(self) -> int | None:
        if not self.up_alive():
            return None
        try:
            cfg = load_config(self.run_dir / "streamrec.yaml")
            end = TopicEnd(cfg, ",".join(cfg.kafka.bootstrap_servers))
        except (StreamrecError, OSError):
            return None
        try:
            return end()
        finally:
            end.close()

    def role_log(self, role: str) -> str:
        for logs in (self.run_dir / "logs", self.base / "run-logs"):
            if (logs / f"{role}.log").exists():
                return (logs / f"{role}.log").read_text(errors="replace")
        return ""

    def _interval(self) -> float:
        return self.rng.uniform(self.args.min_interval, self.args.max_interval) if self.rng else 0.0

    def _open(self, f: Fault) -> bool:
        """Not recovered yet, and still within its time to recover."""
        return f.recovered_at is None and time.time() - f.at <= self._allowed(f)

    def _pending(self) -> bool:
        return any(self._open(f) for f in self.faults)

    def _allowed(self, f: Fault) -> float:
        """How long a fault may take to recover: the recovery timeout after its release."""
        held = (f.release_due - f.at) if f.release_due is not None else 0.0
        return held + self.args.recovery_timeout

    def _restarting(self) -> bool:
        return any(f.name in ("broker", "up") and f.restarted_at is None and self._open(f) for f in self.faults)

    def _tick(self, watcher: PassWatcher, probe: ServiceProbe) -> None:
        time.sleep(_TICK_S)
        watcher.poll()
        self.ledger.snapshot()
        if not self.endpoints and (m := re.search(r"shards up at (\S+);", self.up_output())):
            self.endpoints = m.group(1).split(",")
        self._watch_replay()
        for f in self.faults:
            if f.release_due is not None and f.released_at is None and time.time() >= f.release_due:
                self._release(f)
            if self._open(f):
                self._tend(f, watcher, probe)

    def _watch_replay(self) -> None:
        """The oversized line's fault starts when the replay says it refused the line."""
        if self.oversized_at is None or any(f.name == "oversized_line" for f in self.faults):
            return
        if m := re.search(rf"^line {self.oversized_at} of .*? is (\d+) bytes.*$", self.role_log("replay"), re.M):
            self.faults.append(Fault("oversized_line", f"line {self.oversized_at} of the replayed file",
                                     f"a {m.group(1)}-byte JSON line; the replay said: {m.group(0)[:160]}",
                                     time.time(), healthy_at=time.time()))

    def _wait_started(self, watcher: PassWatcher, probe: ServiceProbe) -> None:
        deadline = time.monotonic() + self.args.startup_timeout
        while time.monotonic() < deadline:
            if not self.up_alive():
                raise SystemExit(f"{self.name}: streamrec up exited {self.proc.returncode}; see {self.log}")
            self._tick(watcher, probe)
            if self.endpoints and watcher.newest is not None and first_ready(probe.probes, 0.0) is not None:
                return
        raise SystemExit(f"{self.name}: no pass committed and bundle served within "
                         f"{self.args.startup_timeout:g} s; see {self.log}")

    # ------------------------------------------------------------------ the faults
    def _inject(self, name: str, watcher: PassWatcher) -> bool:
        """Inject fault ``name``; False if its target cannot be found right now (try later)."""
        assert self.rng is not None
        target, injected, pid, hold = "", "", None, None
        if name in ("shard", "stop_shard"):
            pids = self.shard_pids()
            if not pids:
                return False
            shard = self.rng.randrange(len(pids))
            pid, target = pids[shard], f"shard.{shard}"
        elif name in ("chief", "trainer", "stop_trainer"):
            rank = 0 if name == "chief" else 1 if name == "trainer" else self.rng.randrange(2)
            pid, target = (self.rank_pids() or {}).get(rank), f"trainer rank {rank}"
        elif name == "service":
            pid, target = self.role_pid(b"serve"), "service"
        elif name == "broker":
            pid, target = self.role_pid(b"tansu", exact=False), "embedded broker"
        elif name == "up":
            pid, target = self.proc.pid if self.up_alive() else None, "streamrec up"
        if name in (*KILLS, "broker", "up"):
            if pid is None or not _signal(pid, signal.SIGKILL):
                return False
            injected = "kill -9"
        elif name in ("stop_shard", "stop_trainer"):
            if pid is None or not _signal(pid, signal.SIGSTOP):
                return False
            hold = self.rng.uniform(self.args.stop_min_s, self.args.stop_max_s)
            injected = f"SIGSTOP for {hold:.0f} s, then SIGCONT"
        elif name == "disk_full":
            self.ballast = Ballast(self.run_dir)
            size = self.ballast.fill()
            hold = self.args.disk_full_s
            target = f"tmpfs {self.run_dir} ({self.args.tmpfs_mb} MiB)"
            injected = f"a {size / 2**20:.0f} MiB ballast file to ENOSPC, deleted after {hold:g} s"
        elif name == "future_timestamps":
            cfg = load_config(self.run_dir / "streamrec.yaml")
            sample = PlantedModel(seed=self.args.seed + 1).sample(self.args.burst)
            lines = json_text(sample)[0].splitlines(keepends=True)
            try:
                sent = far_future_burst(list(cfg.kafka.bootstrap_servers), cfg.kafka.topic, lines,
                                        years=self.args.years)
            except Exception as exc:  # any client failure: tried again at the next tick
                print(f"chaos: timestamp burst not sent ({exc}); trying again", file=sys.stderr, flush=True)
                return False
            self.injected_records += sent
            target = f"topic '{cfg.kafka.topic}'"
            injected = f"{sent} planted records with a Kafka timestamp {self.args.years:g} years ahead"
        elif name == "idle_connections":
            self.idle = IdleConnections("127.0.0.1", self.port, self.args.idle_connections).start()
            hold = self.args.idle_s
            target = f"API 127.0.0.1:{self.port}"
            injected = f"{self.args.idle_connections} idle TCP connections held {hold:g} s (reopened when closed)"
        now = time.time()
        base = [p for p in watcher.points if p.created_at <= now]
        fault = Fault(name, f"{target} pid {pid}" if pid else target, injected, now, pid=pid,
                      release_due=None if hold is None else now + hold)
        fault.note = f"newest pass at injection: {base[-1].pass_id}" if base else ""
        self.faults.append(fault)
        if name == "up":
            assert self.proc is not None
            self.proc.wait()
            self._restart_up(fault)
        return True

    def _restart_up(self, fault: Fault) -> None:
        """`up` is gone: its roles must have died with it (those left 30 s later are counted and
        killed); then it is started again with the same command."""
        deadline = time.monotonic() + 30
        while (left := run_pids(self.run_dir)) and time.monotonic() < deadline:
            time.sleep(0.5)
        if left:
            self.left_after_up_kills += sorted(left)
            fault.note += f"; {len(left)} processes outlived `up` by 30 s: {sorted(left)} (killed now)"
            for pid in left:
                _signal(pid, signal.SIGKILL)
        self.start()
        fault.restarted_at = time.time()

    def _release(self, f: Fault) -> None:
        if f.name in ("stop_shard", "stop_trainer") and f.pid is not None:
            if not _signal(f.pid, signal.SIGCONT):
                f.note += "; the stopped process was gone at SIGCONT (replaced by the supervisor)"
        elif f.name == "disk_full" and self.ballast is not None:
            self.ballast.free()
            self.ballast = None
        elif f.name == "idle_connections" and self.idle is not None:
            self.idle.stop()
            failed = [p for p in self._probes_between(f.at, time.time()) if p.status == 0 or p.status >= 500]
            f.note += (f"; connections opened {self.idle.opened}, closed by the server {self.idle.closed_by_server}, "
                       f"most held at once {self.idle.most_held}, refused {self.idle.connect_failures}; probes "
                       f"failed while held: {len(failed)} of {len(self._probes_between(f.at, time.time()))}")
            self.idle = None
        f.released_at = time.time()

    def _release_all(self) -> None:
        for f in self.faults:
            if f.release_due is not None and f.released_at is None:
                self._release(f)

    def _probes_between(self, a: float, b: float) -> list[Probe]:
        return [p for p in self.probe.probes if a <= p.t <= b] if self.probe is not None else []

    def _tend(self, f: Fault, watcher: PassWatcher, probe: ServiceProbe) -> None:
        if f.healthy_at is None:
            ok = False
            if f.name == "broker" and f.restarted_at is None:
                self._tend_broker(f)
            elif f.name in ("broker", "up"):
                ok = (self.up_alive() and bool(self.endpoints) and f.restarted_at is not None
                      and first_ready(probe.probes, f.restarted_at) is not None)
            elif f.name in HELD and f.released_at is None:
                ok = False
            elif f.name in ("shard", "stop_shard"):
                pids = self.shard_pids()
                shard = int(f.target.split()[0].split(".")[1])
                ok = pids is not None and (f.name == "stop_shard" or pids[shard] != f.pid)
            elif f.name in ("chief", "trainer", "stop_trainer"):
                ranks = self.rank_pids() or {}
                ok = (len(ranks) == 2 and (f.name == "stop_trainer" or f.pid not in ranks.values())
                      and all(Path(f"/proc/{p}").exists() for p in ranks.values()))
            elif f.name in ("service", "idle_connections"):
                ok = first_ready(probe.probes, f.released_at or f.at) is not None
            else:
                ok = True
            if ok:
                f.healthy_at = time.time()
            return
        before = [p for p in watcher.points if p.created_at <= f.at]
        base = before[-1].records_total if before else 0
        for p in watcher.points:
            if p.created_at >= f.healthy_at and p.records_total > base:
                f.recovered_at = p.created_at
                return
        newest = watcher.newest
        if newest is not None and newest.consumed >= self.expected:
            f.recovered_at = f.healthy_at  # the stream is all trained: nothing left to show progress with

    def _tend_broker(self, f: Fault) -> None:
        """The broker was killed: `up` must fail by itself; then it is started again."""
        if self.up_alive():
            if "said" not in f.note and re.search(r"^streamrec up: failed:", self.up_output(), re.M):
                f.note += f"; `up` said it failed {time.time() - f.at:.1f} s after"
            if time.time() - f.at < self.args.broker_exit_s:
                return
            f.note += (f"; `up` did not exit within {self.args.broker_exit_s:g} s of its broker's death "
                       "(killed with its process group)")
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        else:
            said = re.findall(r"^.*broker.*$", self.up_output(), re.M)
            f.note += (f"; `up` exited {self.proc.returncode} {time.time() - f.at:.1f} s after, saying: "
                       f"{said[-1][:200] if said else '(nothing about the broker)'}")
        self._restart_up(f)

    def stop(self) -> int | None:
        """SIGINT, as Ctrl-C: `up` commits a final pass and stops every role."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=180)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        return self.proc.returncode

    # ------------------------------------------------------------------ the figures
    def report(self, watcher: PassWatcher, probe: ServiceProbe, produced: int | None, up_exit: int | None,
               left: list[int]) -> dict[str, Any]:
        for pass_id in [p.pass_id for p in watcher.points]:  # those pruning left: verify them again
            path = watcher.root / f"pass-{pass_id:08d}" / "pass.json"
            if path.exists():
                from trainer import checkpoints

                try:
                    checkpoints.read_pass(watcher.root, pass_id)
                except StreamrecError as err:
                    watcher.corrupt.append(f"pass {pass_id} (at the end): {err}")
        final = watcher.newest
        recovered = [f.recovery_s for f in self.faults if f.recovery_s is not None]
        started = self.started
        excused = [(started, first_ready(probe.probes, started) or float("inf"))]
        excused += [(f.at, first_ready(probe.probes, f.restarted_at or f.at) or float("inf")) for f in self.faults
                    if f.name in EXCUSED]
        consumed = final.consumed if final else 0
        total = final.records_total if final else 0
        dead_lettered = min(watcher.losses, 1 if self.oversized_at is not None else 0)
        final_pass_said = re.findall(r"final pass.*$", self.up_output(), re.M)
        return {
            "run": self.name, "up_exit": up_exit, "up_starts": 1 + sum(1 for f in self.faults if f.restarted_at),
            "faults": len(self.faults), "faults_recovered": len(recovered) if up_exit == 0 else 0,
            "faults_skipped": self.skipped, "faults_not_injected": self.not_injected,
            "fault_log": [asdict(f) | {"recovery_s": f.recovery_s, "at_s": round(f.at - started, 1),
                                       "held_s": None if f.released_at is None else round(f.released_at - f.at, 1)}
                          for f in self.faults],
            "recovery_p50_s": round(float(np.percentile(recovered, 50)), 2) if recovered else None,
            "recovery_max_s": round(max(recovered), 2) if recovered else None,
            "records_in_stream": self.records, "records_injected": self.injected_records,
            "records_expected": self.expected, "records_produced": produced,
            "final_pass": final.pass_id if final else None, "final_records_total": total,
            "final_offsets_total": consumed, "final_pass_said": final_pass_said[-1] if final_pass_said else None,
            "double_counted": watcher.duplicates, "dead_lettered_expected": dead_lettered,
            "lost": watcher.losses - dead_lettered, "not_reached": max(0, self.expected - consumed),
            "passes_verified": watcher.verified, "passes_corrupt": len(watcher.corrupt),
            "corrupt": watcher.corrupt, "passes_pruned_unverified": watcher.pruned_unverified,
            "final_auc": round(final.auc_total, 4) if final and final.auc_total is not None else None,
            **service_errors(probe.probes, excused),
            "processes_left": len(left) + len(self.left_after_up_kills), "pids_left": left,
            "pids_outliving_up": self.left_after_up_kills, "run_dir": str(self.run_dir), "log": str(self.log),
        }


def _signal(pid: int, sig: signal.Signals) -> bool:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return False
    return True


def popular_users(seed: int, n: int = 20) -> list[str]:
    """The planted model's ``n`` most frequent user ids, as its records write them."""
    return [f"{int(x):08x}" for x in PlantedModel(seed=seed).raw_ids(USER_SLOT, np.arange(n))]


def targets(chaos: dict[str, Any], auc: dict[str, Any]) -> dict[str, bool]:
    rate = chaos["error_rate_outside_restarts"]
    diff = auc["difference"]
    auc_ok = diff is not None and abs(diff) <= AUC_TOLERANCE
    every = chaos["faults_recovered"] == chaos["faults"] > 0 and not chaos["faults_not_injected"]
    return {"all_faults_recovered": every,
            "zero_lost": chaos["lost"] == 0 and chaos["not_reached"] == 0,
            "zero_double_counted": chaos["double_counted"] == 0,
            "zero_corrupt_passes": chaos["passes_corrupt"] == 0,
            "zero_processes_left": chaos["processes_left"] == 0,
            "auc_within_0.01": bool(auc_ok),
            "service_errors_below_1pct": rate is not None and rate < TARGET_ERROR_RATE}


ROWS = [("faults (recovered)", lambda r: f"{r['faults']} ({r['faults_recovered']})"),
        ("recovery p50 / max s", lambda r: f"{r['recovery_p50_s']} / {r['recovery_max_s']}"),
        ("`up` started", lambda r: str(r["up_starts"])),
        ("records: file + injected", lambda r: f"{r['records_in_stream']} + {r['records_injected']}"),
        ("produced (replays that finished)", lambda r: str(r["records_produced"])),
        ("topic end offsets (last broker)", lambda r: str(r["topic_end_offsets"])),
        ("final pass: records / offsets", lambda r: f"{r['final_records_total']} / {r['final_offsets_total']}"),
        ("lost / double-counted", lambda r: f"{r['lost']} / {r['double_counted']}"),
        ("dead-lettered (the oversized line)", lambda r: str(r["dead_lettered_expected"])),
        ("not reached by final pass", lambda r: str(r["not_reached"])),
        ("passes verified / corrupt", lambda r: f"{r['passes_verified']} / {r['passes_corrupt']}"),
        ("requests (errors outside restarts)", lambda r: f"{r['requests']} ({r['errors_outside_restarts']})"),
        ("error rate outside restarts", lambda r: "-" if r["error_rate_outside_restarts"] is None
         else f"{100 * r['error_rate_outside_restarts']:.2f}%"),
        ("errors excused (startup, restarts)", lambda r: str(r["errors_during_restarts"])),
        ("final progressive AUC", lambda r: str(r["final_auc"])),
        ("processes left", lambda r: str(r["processes_left"])),
        ("up exit code", lambda r: str(r["up_exit"]))]


def parse_faults(text: str) -> tuple[str, ...]:
    chosen = tuple(f.strip() for f in text.split(",") if f.strip())
    unknown = [f for f in chosen if f not in FAULTS]
    if unknown or not chosen:
        raise argparse.ArgumentTypeError(f"unknown fault(s) {', '.join(unknown) or '(none given)'}; "
                                         f"choose from {','.join(FAULTS)}")
    return chosen


def stream_files(args: argparse.Namespace, faults: tuple[str, ...]) -> tuple[Path, int, Path, int, int | None]:
    """The clean stream (for the runs without faults) and the chaos run's (with the oversized line
    a quarter into the fault window, if chosen): paths, line counts and that line's number."""
    window_s = max(args.minutes * 60, len(faults) * ((args.min_interval + args.max_interval) / 2 + PER_FAULT_S))
    records = int(args.rate * (STARTUP_S + window_s))
    folder = Path(tempfile.mkdtemp(prefix="streamrec-chaos-stream-"))
    clean = folder / "events.jsonl"
    write_dataset(clean, PlantedModel(seed=args.seed), records, fmt="json")
    if "oversized_line" not in faults:
        return clean, records, clean, records, None
    from streaming.kafka_config import KafkaConfig

    at = int(args.rate * (STARTUP_S + window_s / 4))
    chaos = folder / "events-oversized.jsonl"
    with open(clean, "rb") as src, open(chaos, "wb") as dst:
        for i, line in enumerate(src):
            if i == at:
                dst.write(oversized_line(max(1 << 20, 2 * KafkaConfig().max_message_bytes)))
            dst.write(line)
    return clean, records, chaos, records + 1, at + 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=10.0,
                    help="length of the fault window (at least what the plan of faults takes)")
    ap.add_argument("--max-minutes", type=float, default=None,
                    help="inject no fault of the plan after this long (those left are reported as not injected)")
    ap.add_argument("--faults", type=parse_faults, default=FAULTS,
                    help=f"comma-separated faults to inject (default all): {','.join(FAULTS)}")
    ap.add_argument("--rate", type=float, default=500.0, help="records/s of the replayed stream")
    ap.add_argument("--seed", type=int, default=12, help="seeds the stream and the faults")
    ap.add_argument("--min-interval", type=float, default=15.0, help="s between faults, at least")
    ap.add_argument("--max-interval", type=float, default=60.0, help="s between faults, at most")
    ap.add_argument("--recovery-timeout", type=float, default=240.0,
                    help="s a fault has to recover after it is released")
    ap.add_argument("--startup-timeout", type=float, default=300.0)
    ap.add_argument("--stall", type=float, default=90.0, help="end a run when records stop moving this long")
    ap.add_argument("--stop-min-s", type=float, default=30.0, help="SIGSTOP held at least this long")
    ap.add_argument("--stop-max-s", type=float, default=60.0, help="SIGSTOP held at most this long")
    ap.add_argument("--disk-full-s", type=float, default=60.0, help="how long the disk stays full")
    ap.add_argument("--tmpfs-mb", type=int, default=512, help="size of the tmpfs holding the chaos run's directory")
    ap.add_argument("--broker-exit-s", type=float, default=120.0,
                    help="how long `up` may take to fail after its broker is killed")
    ap.add_argument("--burst", type=int, default=2000, help="records of the far-future timestamp burst")
    ap.add_argument("--years", type=float, default=5.0, help="how far ahead the burst's timestamps are")
    ap.add_argument("--idle-connections", type=int, default=1000)
    ap.add_argument("--idle-s", type=float, default=60.0, help="how long the idle connections are held")
    ap.add_argument("--baselines", type=int, default=1,
                    help="no-fault runs of the same stream: with 2 or more, their spread shows how much the final "
                    "AUC moves from timing alone, and the chaos run is compared with their mean")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--save", metavar="FILE", help="also write the JSON result to FILE")
    args = ap.parse_args()

    clean, records, chaos_stream, chaos_records, oversized_at = stream_files(args, args.faults)
    chaos = Run("chaos", chaos_stream, chaos_records, args, random.Random(args.seed), args.faults,
                oversized_at).execute()
    calms = [Run("no-faults" if i == 0 else f"no-faults-{i + 1}", clean, records, args, None).execute()
             for i in range(args.baselines)]
    calm = calms[0]
    auc = auc_comparison(chaos["final_auc"], [c["final_auc"] for c in calms])
    met = targets(chaos, auc)
    auc_diff = auc["difference"]
    result = {"minutes": args.minutes, "rate": args.rate, "seed": args.seed, "faults": list(args.faults),
              "chaos": chaos, "no_faults": calm, "more_no_faults": calms[1:], "auc": auc, "auc_difference": auc_diff,
              "targets_met": met, "all_targets_met": all(met.values())}
    if args.save:
        Path(args.save).write_text(json.dumps(result, indent=1))
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"chaos soak: {args.minutes:g} min fault window, faults {','.join(args.faults)}; {chaos_records} records "
          f"at {args.rate:g}/s, seed {args.seed}")
    for line in chaos["faults_skipped"]:
        print(f"SKIPPED {line}")
    if chaos["faults_not_injected"]:
        print(f"NOT INJECTED (--max-minutes ran out): {', '.join(chaos['faults_not_injected'])}")
    print(f"{'':<40}{'chaos':>24}{'no faults':>24}")
    for label, cell in ROWS:
        print(f"{label:<40}{cell(chaos):>24}{cell(calm):>24}")
    if len(calms) > 1:
        print(f"no-fault runs' final AUC: {', '.join(str(a) for a in auc['no_kills_aucs'])} (mean "
              f"{auc['no_kills_mean']}, spread {auc['no_kills_spread']})")
    print(f"AUC chaos - no faults{' (mean)' if len(calms) > 1 else ''}: {auc_diff} (target within {AUC_TOLERANCE})")
    if chaos["final_pass_said"]:
        print(f"`up` on the way out: {chaos['final_pass_said']}")
    print(f"{'fault':<18}{'at s':>7}{'held s':>8}{'recovery':>12}  target; injected; note")
    for f in chaos["fault_log"]:
        took = "NOT" if f["recovery_s"] is None else f"{f['recovery_s']:.1f} s"
        held = "-" if f["held_s"] is None else f"{f['held_s']:.0f}"
        print(f"{f['name']:<18}{f['at_s']:>7.0f}{held:>8}{took:>12}  {f['target']}; {f['injected']}"
              f"{'; ' + f['note'].lstrip('; ') if f['note'] else ''}")
    for name, ok in met.items():
        print(f"target {name}: {'met' if ok else 'NOT met'}")
    print(f"logs: {' '.join(r['log'] for r in [chaos, *calms])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
