"""`streamrec up` end to end: embedded broker, generator at a fixed rate, 2 shards, 2 trainers
and the service. It learns (progressive AUC clearly above 0.5), commits and exports passes,
serves lookups and similar items, the admin API and the dashboard agree; Ctrl-C leaves no
process behind, and a second `up` in the same run directory resumes from the last pass."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from launcher.launch import free_ports
from launcher.up import RUN_TAG_ENV
from launcher.up_status import find_number
from logrecords.generator import ITEM_SLOT, USER_SLOT, PlantedModel
from logrecords.hashing import hash_strings
from logrecords.schema_config import SchemaConfig

from .headless_chromium import LINE_RGB, REF_RGB, chart_boxes, count_color, ensure_chromium, screenshot

pytestmark = pytest.mark.process

CONFIG = {
    "kafka": {"partitions": 2, "batch_size": 256, "batch_timeout_ms": 100, "max_poll_interval_ms": 5000,
              "session_timeout_ms": 5000},
    "train": {"passes": {"seconds": 4, "records": None}, "metric_window": 2000},
    "service": {"poll_seconds": 0.5},
    # a fresh lease table grants no rank for its first ttl: the default 10 s would idle each start that long
    "up": {"shards": 2, "workers": 2, "generator": {"rate": 800, "seed": 3}, "rank_lease_ttl_s": 3,
           # the final pass's and the trainers' stop bounds sum to less than ctrl_c's wait: a stop that hangs
           # fails on what `up` then says (not committed, killed after its grace), with the roles' stacks
           "stop_timeout_s": 30},
}
BOUND_S = 150  # each phase must get there within this bound (a bound, not a timing assertion)
POLL_S = 0.25  # between two looks of wait_for (a look is one small request): a phase ends ~0.1 s after it happens


def run_processes(run_dir: Path) -> list[int]:
    """Pids of live processes started by the `up` of ``run_dir`` (they carry its tag)."""
    tag = f"{RUN_TAG_ENV}={run_dir}".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if tag in (entry / "environ").read_bytes().split(b"\0"):
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
                if state != "Z":
                    pids.append(int(entry.name))
        except OSError:
            continue  # exited meanwhile, or not ours to read
    return pids


class Up:
    """One `streamrec up --plain` process for the test; stopped with SIGINT like Ctrl-C."""

    def __init__(self, run_dir: Path, config: Path, port: int, extra: tuple[str, ...] | list[str] = (), *,
                 sigint_ignored: bool = False) -> None:
        self.run_dir, self.port = run_dir, port
        self.api = f"http://127.0.0.1:{port}"
        self.log = run_dir.parent / f"up-{time.monotonic_ns()}.log"
        argv = [sys.executable, "-m", "cli", "up", "--plain", "--config", str(config),
                "--run-dir", str(run_dir), "--port", str(port), *extra]
        with open(self.log, "wb") as out:
            # sigint_ignored: as a shell starts a background job (`streamrec up &` in a script)
            ignore = (lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if sigint_ignored else None
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                         preexec_fn=ignore)
        self.token = ""

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]

    def get(self, path: str, *, admin: bool = False, body: dict | None = None) -> Any:
        if admin and not self.token:
            self.token = (self.run_dir / "admin-token").read_text().strip()
        headers = {"Content-Type": "application/json"}
        if admin:
            headers["Authorization"] = f"Bearer {self.token}"
        data = json.dumps(body).encode() if body is not None else None
        with urllib.request.urlopen(urllib.request.Request(self.api + path, data=data, headers=headers),
                                    timeout=10) as r:
            return json.loads(r.read())

    def wait_for(self, what: str, check: Callable[[], Any]) -> Any:
        deadline = time.monotonic() + BOUND_S
        last: Any = None
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"up exited {self.proc.returncode} waiting for {what}:\n{self.output()}"
            try:
                last = check()
                if last:
                    return last
            except (OSError, urllib.error.URLError, ValueError, KeyError, TypeError):
                pass
            time.sleep(POLL_S)
        raise AssertionError(f"not within {BOUND_S} s: {what} (last: {last})\n{self.output()}")

    def job(self) -> dict[str, Any]:
        return self.get("/admin/status", admin=True)["job"]["status"]

    def ctrl_c(self) -> int:
        self.proc.send_signal(signal.SIGINT)
        return self.exit_code(within_s=120, after="SIGINT")

    def exit_code(self, *, within_s: float, after: str) -> int:
        """`up`'s exit code; if it has not exited within ``within_s``, every stack, and a failure."""
        try:
            return self.proc.wait(timeout=within_s)
        except subprocess.TimeoutExpired:
            hung = self.stacks()
            os.killpg(self.proc.pid, signal.SIGKILL)
            raise AssertionError(f"up did not stop within {within_s} s of {after}:\n{hung}") from None

    def stacks(self) -> str:
        """Every thread's stack of `up` and of each role still running (SIGUSR1: every streamrec
        command writes them to its log), then the end of each role's log: why a stop hangs."""
        for pid in [self.proc.pid, *run_processes(self.run_dir)]:
            with contextlib.suppress(OSError):
                if b"cli" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    os.kill(pid, signal.SIGUSR1)
        time.sleep(1.0)
        tails = [f"--- {log.name} ---\n{log.read_text(errors='replace')[-6000:]}"
                 for log in sorted((self.run_dir / "logs").glob("*.log"))]
        return f"--- up ---\n{self.output()}\n" + "\n".join(tails)

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        for pid in run_processes(self.run_dir):  # what a failed test would otherwise leave behind
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)


@pytest.fixture
def up_factory(tmp_path: Path) -> Iterator[Callable[[], Up]]:
    config = tmp_path / "streamrec.yaml"
    store = tmp_path / "store"  # roots given as file:// URLs, as on a cluster's shared volume
    roots = {"checkpoint_dir": f"file://{store}/checkpoints", "export_dir": f"file://{store}/exports"}
    config.write_text(yaml.safe_dump({**CONFIG, "train": {**CONFIG["train"], **roots}}))
    run_dir = tmp_path / "run"
    started: list[Up] = []

    def start() -> Up:
        (port,) = free_ports(1)
        started.append(Up(run_dir, config, port))
        return started[-1]

    yield start
    for up in started:
        up.kill()


def popular_ids(run_dir: Path, slot: int, name: str, n: int = 20) -> list[int]:
    """Feature ids of the generator's ``n`` most frequent values of ``slot`` (as the trainers hash them)."""
    effective = yaml.safe_load((run_dir / "streamrec.yaml").read_text())
    schema = SchemaConfig.model_validate(effective["schema"])
    model = PlantedModel(seed=effective["up"]["generator"]["seed"])
    raw = [f"{int(x):08x}" for x in model.raw_ids(slot, np.arange(n))]
    spec = next(s for s in schema.sparse_slots if s.name == name)
    ids, _ = hash_strings(raw, slot_id=schema.slot_ids()[name], kind=spec.hash)
    return [int(i) for i in ids]


def test_up_learns_serves_stops_cleanly_and_resumes(up_factory: Callable[[], Up], tmp_path: Path) -> None:
    up = up_factory()
    run_dir = up.run_dir

    # Learns: progressive AUC clearly above chance, with at least two passes committed and exported.
    up.wait_for("AUC > 0.6", lambda: (find_number(up.job(), "auc") or 0) > 0.6)
    up.wait_for("2 passes committed", lambda: (find_number(up.job(), "pass") or 0) >= 2)
    bundle = up.wait_for("2 bundles served", lambda: (v := up.get("/readyz")["version"]) >= 2 and v)

    # Serves what it learned.
    users = popular_ids(run_dir, USER_SLOT, "user_id")
    found = up.get("/v1/embeddings:lookup", body={"slot": "user_id", "ids": users})
    assert found["ids"] and all(len(r) == len(found["rows"][0]) > 0 for r in found["rows"])
    items = popular_ids(run_dir, ITEM_SLOT, "item_id")
    similar = up.wait_for("similar items", lambda: next(
        (s for i in items if len((s := up.get(f"/v1/items/{i}/similar?k=5"))["items"]) == 5), None))
    assert len(similar["items"]) == 5

    status = up.get("/admin/status", admin=True)
    assert status["bundle"]["version"] >= bundle
    assert list((tmp_path / "store" / "exports").glob("*/bundle.json"))  # the file:// roots were used
    assert (find_number(status["job"]["status"], "pass") or 0) >= 2

    # The dashboard draws its charts from the live system, opened by the link up prints. Consumer
    # lag is charted when the job reports it (the console computes it from Kafka itself; the
    # service has no Kafka access). The link carries the generator's Bayes-optimal AUC, drawn as
    # a reference line on the AUC chart.
    link = re.search(r"dashboard (\S+)", up.log.read_text(errors="replace"))
    assert link and link.group(1).startswith(f"{up.api}/#token={up.token}&bayes_auc="), up.output()
    png = screenshot(ensure_chromium(), link.group(1), tmp_path / "dashboard.png")
    drawn = {name: count_color(png, box, LINE_RGB) for name, box in chart_boxes().items()}
    charted = {"rate", "auc", "rows", "freshness"} | ({"lag"} if find_number(up.job(), "lag") is not None else set())
    assert all(drawn[name] > 0 for name in charted), drawn
    assert count_color(png, chart_boxes()["auc"], REF_RGB) > 100, "no Bayes-optimal AUC line"

    logs = {p.name for p in (run_dir / "logs").glob("*.log")}
    assert {"broker.log", "generator.log", "service.log", "server.0.log", "server.1.log", "worker.0.log",
            "worker.1.log"} <= logs  # one log file per role
    assert run_processes(run_dir), "the run's processes should carry its tag"
    assert up.ctrl_c() == 0, up.output()
    assert run_processes(run_dir) == [], "Ctrl-C left processes behind"
    final = re.search(r"final pass committed: pass (\d+)", up.output())
    assert final, up.output()
    final_pass = int(final.group(1))

    # A second `up` in the same run directory resumes from the last pass, then trains on.
    again = up_factory()
    again.wait_for(f"pass {final_pass} restored", lambda: (find_number(again.job(), "pass") or 0) >= final_pass)
    again.wait_for("a new pass after the restart", lambda: (find_number(again.job(), "pass") or 0) > final_pass)
    # The embedded broker starts empty again: training goes on with the new stream, not waiting
    # for it to reach the offsets of the old one.
    again.wait_for("records trained after the restart", lambda: (find_number(again.job(), "records_run") or 0) > 0)
    passes = again.get("/admin/passes", admin=True)
    assert final_pass in [p["pass"] for p in passes if "pass" in p]
    assert again.ctrl_c() == 0, again.output()
    assert run_processes(run_dir) == []
