"""Chaos soak: does `streamrec up` survive kill -9 of its roles without losing a record?

Writes a stream of planted-model events to a file (``--rate`` records/s for the startup
allowance plus ``--minutes``, so the record count is known exactly) and runs it twice through
``streamrec up --replay`` (2 shards, 2 trainers, the service, the embedded broker, the replay
at ``--rate``, set explicitly: ``up.replay.rate`` and ``--replay-rate``, as a replay is unthrottled
by default), in this one invocation, each in a fresh run directory:

- **chaos**: once a bundle is served and a pass committed, for ``--minutes`` a kill -9 of a
  random role (a random shard, the chief = the holder of rank 0, the other trainer = rank 1,
  the service) every 15-60 s (uniform, ``--seed``); the next kill waits until the previous
  victim has recovered. `up`'s supervisor restarts each victim.
- **no kills**: the same stream, the same duration, nothing killed: the baseline.

After the kill window each run waits until the committed offsets reach the end of the stream
(or records stop moving for ``--stall`` s), then stops `up` with SIGINT (it commits a final
pass) and reports:

- kills survived: kills whose victim recovered within ``--recovery-timeout`` s, `up` alive.
- recovery time of a kill = ``created_at`` of the first pass committed after the victim was
  healthy again with more records than the newest pass committed at the kill (or one whose
  offsets reach the stream's end) - the time of the kill. Healthy again: a shard answers
  HEALTH from a new pid (all shards answering); a trainer: every rank is leased by a live pid
  that is not the victim's; the service: ``/readyz`` answers 200 after the kill.
- records: produced (what the replay says it produced, over all its starts; the file's lines)
  against the final committed pass's ``records_total`` and the sum of its ``offsets``. The
  topic's end offsets are shown too, but the embedded broker's ListOffsets answers short of what
  was produced (9,000 records sent: 8,686), so they are not the count. Every pass is
  read as it commits; a pass whose records grew by more than its offsets advanced over the
  pass before double-counted the difference, by less lost it. Records beyond the final offsets
  were never trained ("not reached"); the target counts them as lost.
- passes whose manifest fails :func:`trainer.checkpoints.read_pass`: every pass is verified as
  it is committed (pruning removes old ones) and those left are verified again at the end.
- served requests: a client thread sends ``/v1/embeddings:lookup`` (the 20 most frequent
  users) and ``/readyz`` every 0.2 s; a failure is a 5xx or no answer. Failures are excused
  before the first bundle and from a service kill until ``/readyz`` answers again.
- final progressive AUC (the final pass's cumulative ``auc_total``) of both runs. The AUC also
  moves with timing alone (async steps, mini-batches cut by time, pass boundaries): with
  ``--baselines N`` (N >= 2) the stream is run N times without kills, their spread is printed and
  the chaos run is compared with their mean.
- processes left after `up` exits: those tagged with the run (``STREAMREC_UP_RUN_DIR``) or in
  any process group the run had.

Targets: 0 lost, 0 double-counted, 0 corrupt passes, 0 processes left, final AUC
within 0.01 of the no-kill run, service error rate < 1% outside restarts. Known limit: the
counts come from the trainers, so a restarted shard that silently rolled back its rows
loses updates, not records; only the AUC can show that.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
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
    PassWatcher,
    ProcessLedger,
    ServiceProbe,
    auc_comparison,
    first_ready,
    run_pids,
    service_errors,
)
from core.errors import StreamrecError
from launcher.launch import free_ports
from launcher.system_config import load_config, resolve_root
from launcher.up_kafka import TopicEnd
from logrecords.generator import USER_SLOT, PlantedModel
from logrecords.sample_encoding import write_dataset
from ps.auth import read_secret
from ps.client import PSClient
from ps.ps_config import ClientConfig

VICTIMS = ("shard", "chief", "trainer", "service")
STARTUP_S = 60.0  # records in the file for `up` to start before the kill window
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
class Kill:
    victim: str  # shard.<i>, chief, trainer or service
    pid: int
    at: float  # time.time() right after the signal
    healthy_at: float | None = None
    recovered_at: float | None = None  # created_at of the first pass showing progress

    @property
    def recovery_s(self) -> float | None:
        return None if self.recovered_at is None else self.recovered_at - self.at


class Run:
    """One `streamrec up --replay` of the stream; kills roles if ``rng`` is given."""

    def __init__(self, name: str, stream: Path, records: int, args: argparse.Namespace, rng: random.Random | None):
        self.name, self.stream, self.records, self.args, self.rng = name, stream, records, args, rng
        self.base = Path(tempfile.mkdtemp(prefix=f"streamrec-chaos-{name}-"))
        self.run_dir = self.base / "run"
        self.log = self.base / "up.log"
        (self.port,) = free_ports(1)
        self.api = f"http://127.0.0.1:{self.port}"
        self.ledger = ProcessLedger(self.run_dir)
        self.kills: list[Kill] = []
        self.proc: subprocess.Popen | None = None
        self.endpoints: list[str] = []

    # ------------------------------------------------------------------ the cluster
    def start(self) -> None:
        config = self.base / "streamrec.yaml"
        config.write_text(yaml.safe_dump(up_config(self.args.rate, self.args.seed)))
        argv = [sys.executable, "-m", "cli", "up", "--plain", "--config", str(config), "--run-dir",
                str(self.run_dir), "--port", str(self.port), "--replay", str(self.stream), "--replay-format", "json",
                "--replay-rate", f"{self.args.rate:g}"]
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                         cwd=REPO)
        self.ledger.pids.add(self.proc.pid)
        self.ledger.groups.add(self.proc.pid)

    def up_alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _ps(self) -> PSClient:
        return PSClient(self.endpoints, config=ClientConfig(timeout_s=1.0, retries=0),
                        secret=read_secret(self.run_dir / "ps-secret"))

    def shard_pids(self) -> list[int] | None:
        try:
            with self._ps() as ps:
                return [int(h["pid"]) for h in ps.admin.health()]
        except StreamrecError:
            return None

    def rank_pids(self) -> dict[int, int] | None:
        """Rank -> pid of its live lease holder (holders are ``<hostname>:<pid>``)."""
        try:
            with self._ps() as ps:
                table = ps.admin.leases()
        except StreamrecError:
            return None
        return {r: int(lease.holder.rsplit(":", 1)[1]) for r, lease in table.leases.items() if lease.expires_in_s > 0}

    def service_pid(self) -> int | None:
        for pid in run_pids(self.run_dir):
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"serve" in argv:
                return pid
        return None

    # ------------------------------------------------------------------ the run
    def execute(self) -> dict[str, Any]:
        self.start()
        started = time.time()
        probe = ServiceProbe(self.api, slot="user_id", values=popular_users(self.args.seed)).start()
        watcher = PassWatcher(Path(resolve_root("checkpoints", self.run_dir)))
        topic_end: TopicEnd | None = None
        topic_total: int | None = None
        try:
            self._wait_started(watcher, probe)
            topic_end = TopicEnd(load_config(self.run_dir / "streamrec.yaml"),
                                 ",".join(load_config(self.run_dir / "streamrec.yaml").kafka.bootstrap_servers))
            window_end = time.monotonic() + self.args.minutes * 60
            next_kill = time.monotonic() + self._interval()
            stalled_since, last_total = time.monotonic(), -1
            while self.up_alive():
                self._tick(watcher, probe)
                now = time.monotonic()
                pending = self.kills and self.kills[-1].recovered_at is None and not self._given_up(self.kills[-1])
                due = self.rng is not None and window_end > now >= next_kill and not pending
                if due and self._kill():
                    next_kill = now + self._interval()
                if now < window_end or pending:
                    continue
                newest = watcher.newest
                if newest is not None and newest.consumed >= self.records:
                    break  # every record is behind the committed offsets
                total = newest.records_total if newest else 0
                if total != last_total:
                    stalled_since, last_total = now, total
                elif now - stalled_since > self.args.stall:
                    break
            topic_total = topic_end() if topic_end is not None else None
        finally:
            probe.stop()
            if topic_end is not None:
                topic_end.close()
            up_exit = self.stop()
        time.sleep(1.0)
        watcher.poll()  # the final pass, committed on the way out
        left = self.ledger.left()
        counts = re.findall(r"^produced (\d+) records", self.role_log("replay"), re.M)
        produced = sum(int(n) for n in counts) if counts else None  # None: the replay never finished
        return self.report(watcher, probe, started, produced, up_exit, left) | {"topic_end_offsets": topic_total}

    def role_log(self, role: str) -> str:
        path = self.run_dir / "logs" / f"{role}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def _interval(self) -> float:
        return self.rng.uniform(self.args.min_interval, self.args.max_interval) if self.rng else 0.0

    def _given_up(self, kill: Kill) -> bool:
        return time.time() - kill.at > self.args.recovery_timeout

    def _tick(self, watcher: PassWatcher, probe: ServiceProbe) -> None:
        time.sleep(_TICK_S)
        watcher.poll()
        self.ledger.snapshot()
        if self.kills and self.kills[-1].recovered_at is None:
            self._tend_recovery(self.kills[-1], watcher, probe)

    def _wait_started(self, watcher: PassWatcher, probe: ServiceProbe) -> None:
        deadline = time.monotonic() + self.args.startup_timeout
        while time.monotonic() < deadline:
            if not self.up_alive():
                raise SystemExit(f"{self.name}: streamrec up exited {self.proc.returncode}; see {self.log}")
            self._tick(watcher, probe)
            if not self.endpoints and (m := re.search(r"shards up at (\S+);", self.log.read_text(errors="replace"))):
                self.endpoints = m.group(1).split(",")
            if self.endpoints and watcher.newest is not None and first_ready(probe.probes, 0.0) is not None:
                return
        raise SystemExit(f"{self.name}: no pass committed and bundle served within "
                         f"{self.args.startup_timeout:g} s; see {self.log}")

    def _kill(self) -> bool:
        """Kill -9 one random role; False if its pid could not be found right now (try later)."""
        assert self.rng is not None
        victim = self.rng.choice(VICTIMS)
        pid: int | None = None
        if victim == "shard":
            shard = self.rng.randrange(len(self.endpoints))
            victim = f"shard.{shard}"
            pids = self.shard_pids()
            pid = pids[shard] if pids else None
        elif victim in ("chief", "trainer"):
            pid = (self.rank_pids() or {}).get(0 if victim == "chief" else 1)
        else:
            pid = self.service_pid()
        if pid is None:
            return False
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return False
        self.kills.append(Kill(victim, pid, time.time()))
        return True

    def _tend_recovery(self, kill: Kill, watcher: PassWatcher, probe: ServiceProbe) -> None:
        if kill.healthy_at is None:
            if kill.victim.startswith("shard."):
                pids = self.shard_pids()
                ok = pids is not None and pids[int(kill.victim.split(".")[1])] != kill.pid
            elif kill.victim in ("chief", "trainer"):
                ranks = self.rank_pids() or {}
                ok = (len(ranks) == 2 and kill.pid not in ranks.values()
                      and all(Path(f"/proc/{p}").exists() for p in ranks.values()))
            else:
                ok = first_ready(probe.probes, kill.at) is not None
            if ok:
                kill.healthy_at = time.time()
            return
        before = [p for p in watcher.points if p.created_at <= kill.at]
        base = before[-1].records_total if before else 0
        for p in watcher.points:
            if p.created_at >= kill.healthy_at and (p.records_total > base or p.consumed >= self.records):
                kill.recovered_at = p.created_at
                return

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
    def report(self, watcher: PassWatcher, probe: ServiceProbe, started: float, produced: int | None,
               up_exit: int | None, left: list[int]) -> dict[str, Any]:
        for pass_id in [p.pass_id for p in watcher.points]:  # those pruning left: verify them again
            path = watcher.root / f"pass-{pass_id:08d}" / "pass.json"
            if path.exists():
                from trainer import checkpoints

                try:
                    checkpoints.read_pass(watcher.root, pass_id)
                except StreamrecError as err:
                    watcher.corrupt.append(f"pass {pass_id} (at the end): {err}")
        final = watcher.newest
        recovered = [k.recovery_s for k in self.kills if k.recovery_s is not None]
        excused = [(started, first_ready(probe.probes, started) or float("inf"))]
        excused += [(k.at, first_ready(probe.probes, k.at) or float("inf")) for k in self.kills
                    if k.victim == "service"]
        consumed = final.consumed if final else 0
        total = final.records_total if final else 0
        return {
            "run": self.name, "up_exit": up_exit, "kills": len(self.kills),
            "kills_survived": len(recovered) if up_exit == 0 else 0,
            "kill_log": [asdict(k) | {"recovery_s": k.recovery_s} for k in self.kills],
            "recovery_p50_s": round(float(np.percentile(recovered, 50)), 2) if recovered else None,
            "recovery_max_s": round(max(recovered), 2) if recovered else None,
            "records_in_stream": self.records, "records_produced": produced,
            "final_pass": final.pass_id if final else None, "final_records_total": total,
            "final_offsets_total": consumed,
            "double_counted": watcher.duplicates, "lost": watcher.losses,
            "not_reached": max(0, (self.records if produced is None else produced) - consumed),
            "passes_verified": watcher.verified, "passes_corrupt": len(watcher.corrupt),
            "corrupt": watcher.corrupt, "passes_pruned_unverified": watcher.pruned_unverified,
            "final_auc": round(final.auc_total, 4) if final and final.auc_total is not None else None,
            **service_errors(probe.probes, excused),
            "processes_left": len(left), "pids_left": left, "run_dir": str(self.run_dir), "log": str(self.log),
        }


def popular_users(seed: int, n: int = 20) -> list[str]:
    """The planted model's ``n`` most frequent user ids, as its records write them."""
    return [f"{int(x):08x}" for x in PlantedModel(seed=seed).raw_ids(USER_SLOT, np.arange(n))]


def targets(chaos: dict[str, Any], auc: dict[str, Any]) -> dict[str, bool]:
    rate = chaos["error_rate_outside_restarts"]
    diff = auc["difference"]
    auc_ok = diff is not None and abs(diff) <= AUC_TOLERANCE
    return {"all_kills_survived": chaos["kills_survived"] == chaos["kills"] > 0,
            "zero_lost": (chaos["lost"] == 0 and chaos["not_reached"] == 0
                          and chaos["records_produced"] == chaos["records_in_stream"]),
            "zero_double_counted": chaos["double_counted"] == 0,
            "zero_corrupt_passes": chaos["passes_corrupt"] == 0,
            "zero_processes_left": chaos["processes_left"] == 0,
            "auc_within_0.01": bool(auc_ok),
            "service_errors_below_1pct": rate is not None and rate < TARGET_ERROR_RATE}


ROWS = [("kills (survived)", lambda r: f"{r['kills']} ({r['kills_survived']})"),
        ("recovery p50 / max s", lambda r: f"{r['recovery_p50_s']} / {r['recovery_max_s']}"),
        ("records produced (of the file's)", lambda r: f"{r['records_produced']} ({r['records_in_stream']})"),
        ("topic end offsets (broker)", lambda r: str(r["topic_end_offsets"])),
        ("final pass: records / offsets", lambda r: f"{r['final_records_total']} / {r['final_offsets_total']}"),
        ("lost / double-counted", lambda r: f"{r['lost']} / {r['double_counted']}"),
        ("not reached by final pass", lambda r: str(r["not_reached"])),
        ("passes verified / corrupt", lambda r: f"{r['passes_verified']} / {r['passes_corrupt']}"),
        ("requests (errors outside restarts)", lambda r: f"{r['requests']} ({r['errors_outside_restarts']})"),
        ("error rate outside restarts", lambda r: "-" if r["error_rate_outside_restarts"] is None
         else f"{100 * r['error_rate_outside_restarts']:.2f}%"),
        ("errors excused (startup, service down)", lambda r: str(r["errors_during_restarts"])),
        ("final progressive AUC", lambda r: str(r["final_auc"])),
        ("processes left", lambda r: str(r["processes_left"])),
        ("up exit code", lambda r: str(r["up_exit"]))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=10.0, help="length of the kill window")
    ap.add_argument("--rate", type=float, default=500.0, help="records/s of the replayed stream")
    ap.add_argument("--seed", type=int, default=12, help="seeds the stream and the kills")
    ap.add_argument("--min-interval", type=float, default=15.0)
    ap.add_argument("--max-interval", type=float, default=60.0)
    ap.add_argument("--recovery-timeout", type=float, default=240.0)
    ap.add_argument("--startup-timeout", type=float, default=300.0)
    ap.add_argument("--stall", type=float, default=90.0, help="end a run when records stop moving this long")
    ap.add_argument("--baselines", type=int, default=1,
                    help="no-kill runs of the same stream: with 2 or more, their spread shows how much the final AUC "
                    "moves from timing alone, and the chaos run is compared with their mean")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--save", metavar="FILE", help="also write the JSON result to FILE")
    args = ap.parse_args()

    records = int(args.rate * (STARTUP_S + args.minutes * 60))
    stream = Path(tempfile.mkdtemp(prefix="streamrec-chaos-stream-")) / "events.jsonl"
    write_dataset(stream, PlantedModel(seed=args.seed), records, fmt="json")
    chaos = Run("chaos", stream, records, args, random.Random(args.seed)).execute()
    calms = [Run("no-kills" if i == 0 else f"no-kills-{i + 1}", stream, records, args, None).execute()
             for i in range(args.baselines)]
    calm = calms[0]
    auc = auc_comparison(chaos["final_auc"], [c["final_auc"] for c in calms])
    met = targets(chaos, auc)
    auc_diff = auc["difference"]
    result = {"minutes": args.minutes, "rate": args.rate, "seed": args.seed, "chaos": chaos, "no_kills": calm,
              "more_no_kills": calms[1:], "auc": auc, "auc_difference": auc_diff, "targets_met": met,
              "all_targets_met": all(met.values())}
    if args.save:
        Path(args.save).write_text(json.dumps(result, indent=1))
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"chaos soak: {args.minutes:g} min kill window, {records} records at {args.rate:g}/s, seed {args.seed}")
    print(f"{'':<38}{'chaos':>22}{'no kills':>22}")
    for label, cell in ROWS:
        print(f"{label:<38}{cell(chaos):>22}{cell(calm):>22}")
    if len(calms) > 1:
        print(f"no-kill runs' final AUC: {', '.join(str(a) for a in auc['no_kills_aucs'])} (mean "
              f"{auc['no_kills_mean']}, spread {auc['no_kills_spread']})")
    print(f"AUC chaos - no kills{' (mean)' if len(calms) > 1 else ''}: {auc_diff} (target within {AUC_TOLERANCE})")
    for k in chaos["kill_log"]:
        took = f"not within {args.recovery_timeout:g} s" if k["recovery_s"] is None else f"{k['recovery_s']:.1f} s"
        print(f"  kill {k['victim']:<8} pid {k['pid']:<7} recovery {took}")
    for name, ok in met.items():
        print(f"target {name}: {'met' if ok else 'NOT met'}")
    print(f"logs: {' '.join(r['log'] for r in [chaos, *calms])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
