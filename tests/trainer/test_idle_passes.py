"""#14: no pass, no export and no bundle while nothing changed (a heartbeat in the status
instead); passes still commit on their cadence while records flow. A real worker, shard and
broker: a job idle for several pass periods leaves its checkpoint and export directories
byte for byte as they were, and commits again once records come."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml

from core.atomic_files import read_json
from jobcontrol.channel import ControlClient
from trainer.job_config import PassConfig, load_job_config
from trainer.passes import PassClock

from .test_streaming_job import RECORDS, job_yaml, produce


def test_the_clock_ends_no_pass_without_records_and_counts_a_heartbeat(monkeypatch) -> None:
    now = [100.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    clock = PassClock(PassConfig(records=None, seconds=2.0))
    now[0] += 2.5
    assert not clock.due() and clock.idle_checks == 1 and clock.idle_at is not None
    now[0] += 1.0  # the look started the clock over
    clock.add(5)
    assert not clock.due()
    now[0] += 1.0
    assert clock.due() and clock.idle_checks == 1  # records in the pass: it ends on the cadence


def test_a_pass_by_records_ends_once_its_records_stop_coming_with_idle_seconds(monkeypatch) -> None:
    now = [100.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    clock = PassClock(PassConfig(records=1000, seconds=120.0, idle_seconds=3.0), workers=2)
    now[0] += 10.0
    assert not clock.due()  # no record in the pass: nothing to end
    clock.add(200)
    now[0] += 2.0
    clock.add(100)  # records still coming
    now[0] += 2.5
    assert not clock.due()
    now[0] += 1.0  # 3.5 s since the last record: the last records of the stream commit now, not after 120 s
    assert clock.due()
    clock.next_pass(2)
    clock.add(10)
    now[0] += 2.0
    assert not clock.due()
    assert not PassClock(PassConfig(records=1000, seconds=120.0)).due()  # off by default


def _files(*dirs: Path) -> dict[str, int]:
    return {str(p): p.stat().st_mtime_ns for d in dirs if d.exists() for p in d.rglob("*") if p.is_file()}


@pytest.mark.process
def test_an_idle_job_writes_nothing_and_commits_again_when_records_come(broker, cluster, tmp_path: Path) -> None:
    kafka = produce(broker.bootstrap, RECORDS, stop=RECORDS - 500)
    path = job_yaml(tmp_path, "idle", kafka)
    data = yaml.safe_load(path.read_text())
    data["passes"] = {"records": None, "seconds": 1.0, "base_every": 2, "keep": 3}
    path.write_text(yaml.safe_dump(data))
    cfg = load_job_config(path)
    c = cluster(cfg.model.table_configs())
    job = c.train(path, broker.bootstrap, extra=("--max-idle-s", "120"))
    root, exports = Path(cfg.checkpoint_dir), Path(cfg.export_dir)
    client: ControlClient | None = None

    def status() -> dict:
        nonlocal client
        assert job.poll() is None, c.procs.log_of(job)[-3000:]
        if client is None:
            if not (root / "control.json").is_file():
                return {}
            client = ControlClient(read_json(root / "control.json")["endpoint"], timeout_s=60)
        return client.call("status")

    def wait_for(what: str, cond) -> dict:
        deadline = time.monotonic() + 120
        while not cond(s := status()):
            assert time.monotonic() < deadline, f"timed out waiting for {what}\n{c.procs.log_of(job)[-3000:]}"
            time.sleep(0.1)
        return s

    def committed(s: dict) -> int:
        return (s.get("last_commit") or {}).get("records_total", 0)

    try:
        s = wait_for("the records committed", lambda s: committed(s) == RECORDS - 500)
        quiet = wait_for("the first idle look", lambda s: s["heartbeat"]["idle_checks"] >= 1)
        before, last_pass = _files(root, exports), quiet["pass"]
        later = wait_for("three more idle looks",
                         lambda s: s["heartbeat"]["idle_checks"] >= quiet["heartbeat"]["idle_checks"] + 3)
        assert later["pass"] == last_pass and later["heartbeat"]["idle_at"] > quiet["heartbeat"]["idle_at"]
        assert _files(root, exports) == before  # no pass, no export, no history point: nothing written
        produce(broker.bootstrap, RECORDS, kafka=kafka, start=RECORDS - 500)
        s = wait_for("a pass of the new records", lambda s: committed(s) == RECORDS)
        assert s["pass"] > last_pass
    finally:
        if client is not None:
            client.close()
