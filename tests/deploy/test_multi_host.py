"""Multi-host: two shards, two trainers, the service and the broker each on its own "host" (a
network namespace made by the test, see tests/deploy/netns.py), talking over 10.x addresses,
so what loopback skips runs for real: shards off loopback refuse to start without the PS
secret and then refuse unsigned peers; the chief binds job control on 0.0.0.0 and publishes
its advertised address (STREAMREC_ADVERTISE_HOST) in control.json under the checkpoint dir
(the local filesystem, shared like a volume); the service follows that file to the job and
reads rows through to the shards, signed. An unsigned peer on a fourth host is refused."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from ps.ps_config import PSConfig
from streaming.broker import tansu_binary
from trainer import checkpoints
from trainer.job_config import load_job_config

from .netns import Hosts

pytestmark = pytest.mark.process

REPO = Path(__file__).resolve().parents[2]
RECORDS = 2000
TOKEN = "multi-host-admin-token-0123456789"
SHARD_PORT, CONTROL_PORT, SERVICE_PORT, KAFKA_PORT = 7000, 7100, 8080, 9092



def _env(tmp: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STREAMREC_", "TF_CONFIG"))}
    return {**env, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "TMPDIR": str(tmp), **extra}


class Run:
    def __init__(self, net: Hosts, tmp: Path) -> None:
        self.net, self.tmp = net, tmp

    def start(self, host: str, argv: list[str], name: str, **env: str) -> subprocess.Popen:
        home = self.tmp / name
        home.mkdir(exist_ok=True)
        return self.net.popen(host, argv, env=_env(home, **env), cwd=home, log=self.tmp / f"{name}.log")

    def log(self, name: str) -> str:
        path = self.tmp / f"{name}.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""

    def probe(self, host: str, command: str, args: dict[str, Any], timeout_s: float = 120) -> dict[str, Any]:
        done = subprocess.run(self.net.argv(host, [sys.executable, "-m", "tests.deploy.netns_probe", command,
                                                   json.dumps(args)]),
                              env=_env(self.tmp), cwd=REPO, capture_output=True, text=True, timeout=timeout_s)
        assert done.returncode == 0, (command, done.stderr[-3000:])
        return json.loads(done.stdout.strip().splitlines()[-1])


def _wait_for(what: str, check, timeout_s: float, logs) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        got = check()
        if got:
            return got
        assert time.monotonic() < deadline, f"{what}: not within {timeout_s} s; {logs()}"
        time.sleep(0.5)


def test_roles_on_separate_hosts_sign_advertise_discover_and_refuse_strangers(tmp_path: Path) -> None:
    with Hosts("10.231.7") as net:
        run = Run(net, tmp_path)
        hosts = {h: net.add(h) for h in ("shard-0", "shard-1", "trainer-0", "trainer-1", "service", "stranger")}
        hub = net.address("hub")
        bootstrap = f"{hub}:{KAFKA_PORT}"
        kafka_url = f"tcp://{bootstrap}"
        run.start("hub", [str(tansu_binary()), "broker", "--listener-url", kafka_url, "--advertised-listener-url",
                          kafka_url, "--storage-engine", "memory://tansu/"], "broker")

        secret_file = tmp_path / "ps-secret"
        secret_file.write_text(secrets.token_hex(32))
        ck, ex = tmp_path / "checkpoints", tmp_path / "exports"
        kafka = {"topic": "multi-host", "dead_letter_topic": "multi-host.dead", "partitions": 2, "batch_size": 250,
                 "batch_timeout_ms": 200}
        job = {"model": {"type": "wide_deep", "slots": [{"name": f"C{i}"} for i in range(1, 27)],
                         "embedding_dim": 4, "mlp": [8]},
               "kafka": kafka, "passes": {"records": 600, "base_every": 2}, "checkpoint_dir": str(ck),
               "export_dir": str(ex), "control_endpoint": f"tcp://0.0.0.0:{CONTROL_PORT}"}
        job_yaml, ps_yaml = tmp_path / "job.yaml", tmp_path / "ps.yaml"
        job_yaml.write_text(yaml.safe_dump(job))
        ps = PSConfig(tables=load_job_config(job_yaml).model.table_configs())
        ps_yaml.write_text(yaml.safe_dump(ps.model_dump(mode="json")))
        table = ps.tables[0]
        endpoints = [f"tcp://{hosts[f'shard-{i}']}:{SHARD_PORT}" for i in range(2)]

        # A shard bound off loopback without the secret refuses to start.
        shard_argv = [sys.executable, "-m", "cli", "shard", "--config", str(ps_yaml), "--port",
                      str(SHARD_PORT)]
        bare = run.start("shard-0", [*shard_argv, "--index", "0", "--host", hosts["shard-0"]], "bare-shard")
        assert bare.wait(timeout=60) != 0
        assert "without authentication" in run.log("bare-shard")

        for i in range(2):
            run.start(f"shard-{i}", [*shard_argv, "--index", str(i), "--host", "0.0.0.0", "--secret-file",
                                     str(secret_file)], f"shard-{i}")
        signed = {"endpoints": endpoints, "secret_file": str(secret_file)}
        run.probe("hub", "healthy", {**signed, "timeout_s": 60})
        produced = run.probe("hub", "produce", {"bootstrap": bootstrap, "kafka": kafka, "n": RECORDS, "seed": 5})

        for rank in range(2):
            host = f"trainer-{rank}"
            run.start(host, [sys.executable, "-m", "cli", "train", "--config", str(job_yaml), "--bootstrap",
                             bootstrap, "--max-idle-s", "300"], host,
                      STREAMREC_ROLE="worker", STREAMREC_RANK=str(rank), STREAMREC_NUM_WORKERS="2",
                      STREAMREC_SHARD_ENDPOINTS=",".join(endpoints), STREAMREC_PS_CONFIG=str(ps_yaml),
                      STREAMREC_PS_SECRET_FILE=str(secret_file), STREAMREC_ADVERTISE_HOST=hosts[host])
        logs = lambda: {n: run.log(n) for n in ("trainer-0", "trainer-1", "shard-0", "shard-1", "service")}  # noqa: E731

        # Passes commit with records from both trainers, each reading its own partition.
        def committed() -> dict[str, Any] | None:
            for pass_id in reversed(checkpoints.complete_passes(str(ck))):
                man = checkpoints.read_pass(str(ck), pass_id)
                if {"worker-0.json", "worker-1.json"} <= set(man["files"]) and all(man["offsets"].values()) \
                        and len(man["offsets"]) == 2:
                    return man
            return None

        man = _wait_for("a pass with both trainers' records", committed, 120, logs)
        assert 0 < man["records_total"] <= RECORDS and sum(man["offsets"].values()) == man["records_total"]

        # The chief published its advertised address, not the 0.0.0.0 it bound.
        control = json.loads((ck / "control.json").read_text())
        assert control == {"endpoint": f"tcp://{hosts['trainer-0']}:{CONTROL_PORT}", "rank": 0}

        service_yaml = tmp_path / "service.yaml"
        service_yaml.write_text(yaml.safe_dump({
            "host": hosts["service"], "port": SERVICE_PORT, "exports_dir": str(ex), "poll_seconds": 0.3,
            "index": {"kind": "flat"}, "job_control_file": str(ck / "control.json"),
            "job_secret_file": str(secret_file),
            "read_through": {"endpoints": endpoints, "secret_file": str(secret_file), "timeout_s": 5.0}}))
        run.start("service", [sys.executable, "-m", "cli", "serve", "--config", str(service_yaml)], "service",
                  STREAMREC_ADMIN_TOKEN=TOKEN)
        url = f"http://{hosts['service']}:{SERVICE_PORT}"
        ready = run.probe("stranger", "http", {"url": f"{url}/readyz", "until": 200, "timeout_s": 60})
        assert ready["status"] == 200, (ready, logs())

        # The service serves a bundle and answers a lookup, reading rows through to the shards.
        looked = run.probe("stranger", "http", {"url": f"{url}/v1/embeddings:lookup", "method": "POST",
                                                "body": {"slot": "C1", "values": produced["c1"]}})
        assert looked["status"] == 200, looked
        assert looked["body"]["ids"] and len(looked["body"]["rows"]) == len(looked["body"]["ids"])
        metrics = run.probe("stranger", "http", {"url": f"{url}/metrics"})["body"]
        served = [line for line in metrics.splitlines() if line.startswith("streamrec_read_through_served_total")]
        assert served and float(served[0].split()[-1]) >= 1, served

        # /admin/status reaches the job through control.json, across hosts.
        status = run.probe("stranger", "http", {"url": f"{url}/admin/status", "token": TOKEN})
        assert status["status"] == 200, status
        assert status["body"]["job"]["connected"] and "status" in status["body"]["job"], status["body"]["job"]
        assert status["body"]["job"]["endpoint"] == control["endpoint"]
        refused = run.probe("stranger", "http", {"url": f"{url}/admin/status"})
        assert refused["status"] == 401, refused

        # An unsigned peer on a fourth host is refused by every shard; rows unchanged.
        before = run.probe("hub", "stats", {**signed, "table": table.name})
        stranger = run.probe("stranger", "unsigned", {"endpoints": endpoints, "table": table.name, "dim": table.dim,
                                                      "control": control["endpoint"],
                                                      "wrong_secret": secrets.token_hex(16)})
        assert stranger["health"]["error"] == "Unauthorized", stranger
        assert stranger["push"]["error"] == "Unauthorized", stranger
        assert stranger["wrong_secret"]["error"] == "Forbidden", stranger
        after = run.probe("hub", "stats", {**signed, "table": table.name})
        assert after["rows"] == before["rows"]  # the refused push changed nothing
        for b, a in zip(before["stats"], after["stats"], strict=True):  # every shard counted its refusals
            assert a["errors"].get("unauthorized", 0) > b["errors"].get("unauthorized", 0), (b["errors"], a["errors"])
        # Job control takes signed requests only off loopback: the stranger's unsigned status call is refused.
        assert stranger["control"].get("error") == "Unauthorized", stranger["control"]
