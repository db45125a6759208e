"""Trainers without ranks (STREAMREC_RANK=auto, what the Kubernetes Deployment runs) against real
shards and Kafka: two of them lease ranks 0 and 1 and train; the chief is killed with SIGKILL, a
new process gets the freed rank 0 once the ttl ran out, every worker regroups from the last
committed pass, and the job finishes with every record counted exactly once."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from service.job import JobLink
from tables.client import PSClient
from trainer import checkpoints
from trainer.config import load_job_config

from .conftest import topic_name
from .test_streaming_job import job_yaml, produce, wait_exit

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
        return {int(r): v["holder"] for r, v in c.lease("list")["leases"].items()}


def test_leased_ranks_survive_a_killed_chief(broker, cluster, procs, tmp_path: Path) -> None:
    topic = topic_name()
    kafka = {"topic": topic, "dead_letter_topic": f"{topic}.dead", "partitions": 4, "batch_size": 200,
             "batch_timeout_ms": 300}
    produce(broker.bootstrap, FIRST + SECOND, kafka=kafka, stop=FIRST)
    path = job_yaml(tmp_path, "leased", kafka, "deepfm")
    path.write_text(path.read_text().replace("records: 1000", "records: 400"))
    cfg = load_job_config(path)
    assert cfg.passes.records == 400
    c = cluster(cfg.model.table_configs(), servers=2)

    def trainer(holder: str):
        env = {**c.env(0, 2, "async"), "STREAMREC_RANK": "auto", "STREAMREC_RANK_LEASE_TTL": str(TTL_S),
               "STREAMREC_HOLDER_ID": holder}
        return procs.start([sys.executable, "-m", "deploy.cli", "train", "--config", str(path), "--bootstrap",
                            broker.bootstrap, "--max-idle-s", "12"], env=env, log=f"train-{holder}")

    first = {h: trainer(h) for h in ("a", "b")}
    _wait("both ranks leased", lambda: sorted(_holders(c.endpoints[0]).values()) == ["a", "b"], procs)
    root = Path(cfg.checkpoint_dir)
    _wait("the first pass", lambda: bool(checkpoints.complete_passes(root)), procs)
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
    produce(broker.bootstrap, FIRST + SECOND, kafka=kafka, start=FIRST)

    assert wait_exit(first[survivor], 240) == 0, procs.log_of(first[survivor])[-3000:]
    assert wait_exit(replacement, 240) == 0, procs.log_of(replacement)[-3000:]
    link.stop()
    survivor_status = json.loads(procs.log_of(first[survivor]).strip().splitlines()[-1])
    assert survivor_status["rank"] == 1 and survivor_status["regroups"] >= 1
    last = checkpoints.read_pass(root, checkpoints.complete_passes(root)[-1])
    # the regroup went back to the last committed pass: nothing lost, nothing counted twice
    assert last["records_total"] == FIRST + SECOND
    assert sum(last["offsets"].values()) == FIRST + SECOND and sorted(last["offsets"]) == ["0", "1", "2", "3"]
    assert _holders(c.endpoints[0]) == {}  # clean exits released their ranks
