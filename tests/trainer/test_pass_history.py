"""The learning curve (trainer.pass_history): one point per committed pass in a bounded file that
outlives pruning, cumulative AUC from merged histograms, and what a rollback or a damaged file does
to the series; end to end, a real streaming job's chief serves the series over job control."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import numpy as np
import pytest

from core.atomic_files import decode_arrays, read_json, read_verified
from jobcontrol.channel import ControlClient
from stores.store import open_store
from trainer import checkpoints, pass_history
from trainer.job_config import load_job_config
from trainer.metrics import Metrics

from .test_streaming_job import RECORDS, job_yaml, produce, wait_exit


def _point(n: int, **kw: float | None) -> dict:
    return {"pass": n, "time": 1000.0 + n, "records": 10, "records_total": 10 * n, "auc": 0.6, "lag": None, **kw}


def test_points_are_kept_bounded_and_read_back(tmp_path: Path) -> None:
    root = open_store(str(tmp_path))
    for n in range(1, 8):
        pass_history.record(root, _point(n, auc_total=0.5 + n / 100, rss_mb=None), keep=5)
    points = pass_history.read(root)
    assert [p["pass"] for p in points] == [3, 4, 5, 6, 7]  # the newest `keep`
    assert points[-1]["auc_total"] == 0.5 + 7 / 100 and points[-1]["rss_mb"] is None and points[-1]["lag"] is None
    assert points[-1]["records_total"] == 70 and isinstance(points[-1]["records_total"], int)
    assert [p["pass"] for p in pass_history.since(points, 5)] == [6, 7]


def test_a_rolled_back_pass_is_replaced_by_the_next_commit(tmp_path: Path) -> None:
    root = open_store(str(tmp_path))
    for n in range(1, 6):
        pass_history.record(root, _point(n))
    # rolled back to pass 2: the next commit is pass 3 again, and passes 3..5 of the undone run go
    pass_history.record(root, _point(3, auc=0.9))
    points = pass_history.read(root)
    assert [p["pass"] for p in points] == [1, 2, 3] and points[-1]["auc"] == 0.9


def test_a_damaged_file_is_set_aside_and_the_series_goes_on(tmp_path: Path) -> None:
    root = open_store(str(tmp_path))
    pass_history.record(root, _point(1))
    f = tmp_path / pass_history.HISTORY_FILE
    data = bytearray(f.read_bytes())
    data[-3] ^= 0xFF
    f.write_bytes(bytes(data))
    pass_history.record(root, _point(2))
    assert [p["pass"] for p in pass_history.read(root)] == [2]
    assert (tmp_path / f"{pass_history.HISTORY_FILE}.corrupt").read_bytes() == bytes(data)


def _shards(*tables: dict) -> list[dict]:
    return [{"tables": {f"t{i}": t}} for i, t in enumerate(tables)]


def test_a_tiered_tables_point_counts_both_tiers_and_the_passs_hit_rate(tmp_path: Path) -> None:
    tiered = {"rows": 100, "disk_rows": 300, "bytes": 4000, "disk_bytes": 90_000, "ram_hits": 900, "disk_hits": 100}
    plain = {"rows": 50, "bytes": 2000}
    kw = {"created_at": 2000.0, "pass_metrics": {"records": 10}, "total": {}, "records_total": 10, "lag": None,
          "newest_record_time": None}
    first = pass_history.make_point(1, previous={}, shard_stats=_shards(tiered, plain), **kw)
    assert first["rows"] == 450 and first["table_bytes"] == 6000  # every row, in RAM or on disk
    assert (first["disk_rows"], first["disk_bytes"]) == (300, 90_000)
    assert first["ram_hit_rate"] == 0.9  # 900 of the 1000 lookups since the shards started
    later = {**tiered, "ram_hits": 1200, "disk_hits": 300}  # this pass: 300 in RAM, 200 from disk
    second = pass_history.make_point(2, previous={"progress": first}, shard_stats=_shards(later, plain), **kw)
    assert second["ram_hit_rate"] == 0.6
    restarted = {**tiered, "ram_hits": 5, "disk_hits": 5}  # counters back at zero: no rate for the pass
    assert pass_history.make_point(3, previous={"progress": second}, shard_stats=_shards(restarted),
                                   **kw)["ram_hit_rate"] is None
    # the columns travel through the history file; a job without a tier has none of them
    root = open_store(str(tmp_path))
    pass_history.record(root, first)
    pass_history.record(root, second)
    read = pass_history.read(root)
    assert [(p["disk_rows"], p["ram_hit_rate"]) for p in read] == [(300, 0.9), (300, 0.6)]
    assert isinstance(read[0]["disk_lookups"], int)
    untiered = pass_history.make_point(1, previous={}, shard_stats=_shards(plain), **kw)
    assert untiered["disk_rows"] is untiered["ram_hit_rate"] is None and untiered["rows"] == 50


def test_cumulative_metrics_equal_one_histogram_of_every_record(tmp_path: Path) -> None:
    root = open_store(str(tmp_path))
    rng = np.random.default_rng(0)
    everything, previous = Metrics(), {}
    for n in (1, 2, 3):
        p = rng.uniform(size=500)
        y = (rng.uniform(size=500) < p).astype(np.float64)
        this = Metrics()
        this.add(y, p)
        everything.add(y, p)
        total = pass_history.cumulative_metrics(root, previous, this)
        entry = pass_history.write_total(root, n, total)
        previous = {"pass": n, "files": {pass_history.TOTAL_METRICS: entry}}
    assert total.summary() == everything.summary()


@pytest.mark.process
def test_a_jobs_chief_keeps_the_curve_past_pruning_and_serves_it(broker, cluster, tmp_path: Path) -> None:
    kafka = produce(broker.bootstrap)
    path = job_yaml(tmp_path, "run", kafka)  # passes of 1000 records, keep 3
    cfg = load_job_config(path)
    c = cluster(cfg.model.table_configs())
    # idle far longer than the test looks: SIGTERM stops it once it served the curve
    job = c.train(path, broker.bootstrap, extra=("--max-idle-s", "120"))
    root = Path(cfg.checkpoint_dir)
    deadline = time.monotonic() + 240
    status = None
    while True:  # the stream idles after the last pass: the status still shows the last AUC
        assert time.monotonic() < deadline and job.poll() is None, c.procs.log_of(job)[-3000:]
        control = root / "control.json"
        if control.is_file():
            client = ControlClient(read_json(control)["endpoint"], timeout_s=60)
            try:
                status = client.call("status")
                if (status.get("last_point") or {}).get("records_total") == RECORDS:
                    served = client.call("history", since=2)
                    break
            finally:
                client.close()
        time.sleep(0.2)
    assert status["auc_total"] == status["last_point"]["auc_total"] and isinstance(status["auc_total"], float)
    assert isinstance(status["auc"], float)  # the running pass's, else the last pass's: never None once known
    job.send_signal(signal.SIGTERM)  # how Kubernetes stops a pod: the loop ends after this step, exit 0
    assert wait_exit(job) == 0, c.procs.log_of(job)[-3000:]
    points = pass_history.read(open_store(str(root)))
    assert [p["pass"] for p in points] == [1, 2, 3, 4, 5]
    assert checkpoints.complete_passes(root)[0] > 1  # pruned, the curve is not
    assert [p["pass"] for p in served["points"]] == [3, 4, 5] and served["keep"] == pass_history.KEEP
    assert sum(p["records"] for p in points) == RECORDS == points[-1]["records_total"]
    for p in points:
        assert 0.0 < p["auc"] < 1.0 and 0.0 < p["auc_total"] < 1.0 and p["logloss_total"] > 0
        assert p["rows"] > 0 and p["table_bytes"] > 0 and p["lag"] is not None and p["lag"] >= 0
    assert all(p["records_per_s"] > 0 for p in points[1:])
    assert points[0]["auc_total"] == points[0]["auc"]  # the first pass is all there is so far
    last = checkpoints.read_pass(root, 5)
    assert last["progress"] == points[-1]  # the manifest holds the same point

    # a restart goes on with the series and the cumulative metrics from the restored pass
    produce(broker.bootstrap, RECORDS + 2000, kafka=kafka, start=RECORDS)
    again = c.train(path, broker.bootstrap)
    assert wait_exit(again) == 0, c.procs.log_of(again)[-3000:]
    points = pass_history.read(open_store(str(root)))
    assert [p["pass"] for p in points] == [1, 2, 3, 4, 5, 6, 7]
    assert points[-1]["records_total"] == RECORDS + 2000
    man = checkpoints.read_pass(root, 7)
    d = root / checkpoints.pass_name(7)
    total = Metrics.from_arrays(decode_arrays(read_verified(d, man["files"][pass_history.TOTAL_METRICS]), str(d)))
    assert total.count == RECORDS + 2000 and total.summary()["auc"] == points[-1]["auc_total"]
