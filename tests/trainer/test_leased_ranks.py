"""Trainers without ranks (STREAMREC_RANK=auto, what the Kubernetes Deployment runs) against real
shards and Kafka: two of them lease ranks 0 and 1 and train; the chief is killed with SIGKILL, a
new process gets the freed rank 0 once the ttl ran out, every worker regroups from the last
committed pass, and the job finishes with every record counted exactly once. Shard 0 (which
keeps the leases) restarting empty: the trainers keep their ranks and regroup the same way."""

from __future__ import annotations

import json
import signal
import sys
import time
from pathlib import Path

import pytest

from ps.client import PSClient
from service.job import JobLink
from trainer import checkpoints
from trainer.job_config import load_job_config

from .conftest import topic_name
from .test_streaming_job import job_yaml, produce, wait_exit

pytestmark = pytest.mark.process

TTL_S = 4.0
FIRST, SECOND = 1600, 800


def _wait(what: str, cond, procs, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            logs = "\n".join(procs.log_of(p)[-1500:] for p in procs.procs if "train" in str(procs.logs[p.pid]))
            raise AssertionError(f"timed out waiting for {what}\n{logs}")
        time.sleep(0.1)


def _holders(endpoint: str) -> dict[int, str]:
    with PSClient([endpoint]) as c:
        return {r: lease.holder for r, lease in c.admin.leases().leases.items()}


class _Job:
    """Two shards, a 4-partition topic holding the first records, and `train` for leased workers."""

    def __init__(self, broker, cluster, procs, tmp_path: Path) -> None:
        topic = topic_name()
        self.kafka = {"topic": topic, "dead_letter_topic": f"{topic}.dead", "partitions": 4, "batch_size": 200,
                      "batch_timeout_ms": 300}
        self.bootstrap, self.procs = broker.bootstrap, procs
        produce(self.bootstrap, FIRST + SECOND, kafka=self.kafka, stop=FIRST)
        self.path = job_yaml(tmp_path, "leased", self.kafka, "deepfm")
        self.path.write_text(self.path.read_text().replace("records: 1000", "records: 400"))
        self.cfg = load_job_config(self.path)
        assert self.cfg.passes.records == 400
        self.root = Path(self.cfg.checkpoint_dir)
        self.cluster = cluster(self.cfg.model.table_configs(), servers=2)

    def train(self, holder: str, ttl_s: float = TTL_S):
        env = {**self.cluster.env(0, 2, "async"), "STREAMREC_RANK": "auto", "STREAMREC_RANK_LEASE_TTL": str(ttl_s),
               "STREAMREC_HOLDER_ID": holder}
        return self.procs.start([sys.executable, "-m", "cli", "train", "--config", str(self.path),
                                 "--bootstrap", self.bootstrap, "--max-idle-s", "12"], env=env, log=f"train-{holder}")

    def holders(self) -> dict[int, str]:
        return _holders(self.cluster.endpoints[0])

    def start_two(self) -> dict:
        first = {h: self.train(h) for h in ("a", "b")}
        _wait("both ranks leased", lambda: sorted(self.holders().values()) == ["a", "b"], self.procs)
        _wait("the first pass", lambda: bool(checkpoints.complete_passes(self.root)), self.procs)
        return first

    def produce_rest(self) -> None:
        produce(self.bootstrap, FIRST + SECOND, kafka=self.kafka, start=FIRST)

    def check_every_record_counted_once(self) -> None:
        last = checkpoints.read_pass(self.root, checkpoints.complete_passes(self.root)[-1])
        # the regroup went back to the last committed pass: nothing lost, nothing counted twice
        assert last["records_total"] == FIRST + SECOND
        assert sum(last["offsets"].values()) == FIRST + SECOND and sorted(last["offsets"]) == ["0", "1", "2", "3"]
        assert self.holders() == {}  # clean exits released their ranks


def _final_status(procs, p) -> dict:
    return json.loads(procs.log_of(p).strip().splitlines()[-1])


def test_leased_ranks_survive_a_killed_chief(broker, cluster, procs, tmp_path: Path) -> None:
    job = _Job(broker, cluster, procs, tmp_path)
    c, root, trainer = job.cluster, job.root, job.train
    first = job.start_two()
    chief = _holders(c.endpoints[0])[0]
    survivor = "b" if chief == "a" else "a"
    control = root / "control.json"
    link = JobLink(None, timeout_s=30, endpoint_file=str(control))
    assert link.call("status")["rank"] == 0
    old_endpoint = link.endpoint

    procs.kill(first[chief])  # SIGKILL: nothing is released, the lease must run out
    replacement = trainer("c")
    _wait("the replacement to hold rank 0", lambda: _holders(c.endpoints[0]).get(0) == "c", procs)
    assert _holders(c.endpoints[0])[1] == survivor
    _wait("the new chief's control endpoint", lambda: json.loads(control.read_text())["endpoint"] != old_endpoint,
          procs)
    assert link.call("status")["rank"] == 0 and link.endpoint != old_endpoint
    job.produce_rest()

    assert wait_exit(first[survivor], 240) == 0, procs.log_of(first[survivor])[-3000:]
    assert wait_exit(replacement, 240) == 0, procs.log_of(replacement)[-3000:]
    link.stop()
    survivor_status = _final_status(procs, first[survivor])
    assert survivor_status["rank"] == 1 and survivor_status["regroups"] >= 1
    job.check_every_record_counted_once()


def test_trainers_keep_their_ranks_when_shard_0_restarts_empty(broker, cluster, procs, tmp_path: Path) -> None:
    job = _Job(broker, cluster, procs, tmp_path)
    first = job.start_two()
    ranks = {h: r for r, h in job.holders().items()}
    procs.kill(job.cluster.shards[0])  # the lease table and shard 0's rows are gone
    job.cluster.shards[0] = job.cluster.start_shard(0)
    _wait("the holders to take their ranks back", lambda: job.holders() == {r: h for h, r in ranks.items()}, procs)
    job.produce_rest()
    for p in first.values():
        assert wait_exit(p, 240) == 0, procs.log_of(p)[-3000:]
    for holder, p in first.items():
        status = _final_status(procs, p)
        assert status["rank"] == ranks[holder] and status["regroups"] >= 1
    job.check_every_record_counted_once()


def test_sigterm_releases_the_rank_at_once(broker, cluster, procs, tmp_path: Path) -> None:
    job = _Job(broker, cluster, procs, tmp_path)
    with PSClient([job.cluster.endpoints[0]]) as c:  # the table's grace is over (its first request said 1 s)
        _wait("a first rank", lambda: c.admin.claim_rank("warm", workers=2, ttl_s=1).rank is not None, procs)
        c.admin.release_rank("warm", 0)
    lone = job.train("lone", ttl_s=600)  # waits at the start rendezvous for a second worker that never comes
    _wait("its rank", lambda: job.holders() == {0: "lone"}, procs)
    lone.send_signal(signal.SIGTERM)  # what Kubernetes sends a pod it stops
    # still starting (143), or stopped at the rendezvous (2: "stopped while waiting"): not a finished job
    assert wait_exit(lone, 60) in (2, 143), procs.log_of(lone)[-2000:]
    assert job.holders() == {}  # released on the way out, not after the 600 s ttl


def test_a_shard_restart_under_training_and_commits_is_a_regroup_not_an_exit(broker, cluster, procs,
                                                                            tmp_path: Path) -> None:
    """#12: shard 1 (not the lease holder) frozen (SIGSTOP) while the trainers work through a
    backlog, a pass every 200 records per worker: its pulls, pushes and a commit's drain,
    end_pass and save wait on it. It is killed and restarted under them: their requests are
    resent to the new incarnation, whose replies report the restart (also to a commit's control
    calls: no pass is committed on the reloaded shard), and both trainers regroup in-process."""
    job = _Job(broker, cluster, procs, tmp_path)
    first = job.start_two()  # the first pass is committed; most of the backlog is still ahead
    job.produce_rest()
    shard = job.cluster.shards[1]
    shard.send_signal(signal.SIGSTOP)
    procs.kill(shard)
    job.cluster.shards[1] = job.cluster.start_shard(1)
    for p in first.values():
        assert wait_exit(p, 240) == 0, procs.log_of(p)[-3000:]
    for p in first.values():
        log = procs.log_of(p)
        assert "Traceback" not in log and "stops on a fatal error" not in log, log[-3000:]
        assert _final_status(procs, p)["regroups"] >= 1
    job.check_every_record_counted_once()
