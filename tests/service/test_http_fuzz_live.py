"""The OpenAPI fuzz of tests/service/test_openapi_fuzz.py against real processes:
`streamrec serve` under uvicorn, linked through control.json to a live training job (a shard,
one `streamrec train` worker, the embedded broker), so the admin routes run with a valid token
all the way into the job (checkpoint, export, shrink, rollback, pause/resume, policies). Every
operation of the schema, plus invented methods and paths: no 500, the one error shape, the
service's RSS and its /metrics exposition stay bounded, and the job, its control thread and the
service all still answer afterwards. Bounded by hypothesis' ``max_examples``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from launcher.launch import free_ports
from ps.cluster import ClusterSpec, cluster_env
from ps.ps_config import PSConfig
from streaming.broker import EmbeddedBroker
from tests.deploy.netns_probe import produce
from tests.ps.ps_harness import shard_processes
from trainer.job_config import load_job_config

from .service_support import TOKEN, wait_until
from .test_openapi_fuzz import JUNK, SchemaStrategies, _operations

pytestmark = pytest.mark.process

REPO = Path(__file__).resolve().parents[2]
RSS_GROWTH_MB = 150
METRICS_MAX_BYTES = 256 << 10
INVENTED = ["FOO", "BREW", "PROPFIND", "M" * 40, "TRACE", "CONNECTX"]


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for {pid}")


class Live:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.procs: dict[str, subprocess.Popen] = {}

    def start(self, name: str, argv: list[str], env: dict[str, str]) -> subprocess.Popen:
        log = open(self.tmp / f"{name}.log", "ab")  # noqa: SIM115 - owned by the child's lifetime
        p = subprocess.Popen([sys.executable, "-m", "cli", *argv], cwd=REPO, stdout=log,
                             stderr=subprocess.STDOUT, start_new_session=True,
                             env={**os.environ, "OMP_NUM_THREADS": "1", **env})
        log.close()
        self.procs[name] = p
        return p

    def logs(self) -> dict[str, str]:
        return {n: (self.tmp / f"{n}.log").read_text(errors="replace")[-2000:] for n in self.procs}

    def kill_all(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()


@pytest.fixture
def live_service(tmp_path: Path, broker: EmbeddedBroker) -> Iterator[tuple[str, Live]]:
    ck, ex = tmp_path / "checkpoints", tmp_path / "exports"
    topic = f"fuzz-{uuid.uuid4().hex[:10]}"  # a topic of its own on the session broker
    kafka = {"topic": topic, "dead_letter_topic": f"{topic}.dead", "partitions": 1, "batch_size": 200,
             "batch_timeout_ms": 100}
    job = {"model": {"type": "wide_deep", "slots": [{"name": f"C{i}"} for i in range(1, 27)], "embedding_dim": 4,
                     "mlp": [8]},
           "kafka": kafka, "passes": {"records": 300, "base_every": 2}, "checkpoint_dir": str(ck),
           "export_dir": str(ex)}
    job_yaml = tmp_path / "job.yaml"
    job_yaml.write_text(yaml.safe_dump(job))
    tables = PSConfig(tables=load_job_config(job_yaml).model.table_configs()).model_dump(mode="json")["tables"]
    live = Live(tmp_path)
    with shard_processes(tmp_path, tables, n=1) as shards:
        try:
            produce({"bootstrap": broker.bootstrap, "kafka": kafka, "n": 1000, "seed": 2})
            spec = ClusterSpec(role="worker", rank=0, shard_endpoints=tuple(shards.endpoints), num_workers=1,
                               ps_config=str(shards.config))
            live.start("train", ["train", "--config", str(job_yaml), "--bootstrap", broker.bootstrap,
                                 "--max-idle-s", "900"], cluster_env(spec))
            (port,) = free_ports(1)
            service_yaml = tmp_path / "service.yaml"
            service_yaml.write_text(yaml.safe_dump({
                "exports_dir": str(ex), "poll_seconds": 0.3, "index": {"kind": "flat"}, "job_timeout_s": 30.0,
                "job_control_file": str(ck / "control.json")}))
            live.start("service", ["serve", "--config", str(service_yaml), "--port", str(port)],
                       {"STREAMREC_ADMIN_TOKEN": TOKEN})
            base = f"http://127.0.0.1:{port}"

            def ready() -> bool:
                assert all(p.poll() is None for p in live.procs.values()), live.logs()
                try:
                    return httpx.get(f"{base}/readyz", timeout=2).status_code == 200
                except httpx.TransportError:
                    return False

            wait_until(ready, timeout=120, what="a bundle from the live job served")
            yield base, live
        finally:
            live.kill_all()


def draw_request(data: st.DataObject, strategies: SchemaStrategies, path: str, op: dict[str, Any]
                 ) -> tuple[str, dict[str, Any], Any]:
    """(url, query, body) for ``op`` at ``path`` as test_openapi_fuzz draws them; body None without one."""
    url, query = path, {}
    for p in op.get("parameters", []):
        value = data.draw(strategies.of(p.get("schema", {})) | JUNK.map(str))
        if p["in"] == "path":
            url = url.replace("{" + p["name"] + "}", quote(str(value), safe="") or "x")
        elif p["in"] == "query" and data.draw(st.booleans()):
            query[p["name"]] = value if not isinstance(value, dict | list) else str(value)
    body = None
    if "requestBody" in op:
        body = data.draw(strategies.of(op["requestBody"]["content"]["application/json"]["schema"]) | JUNK)
    return url, query, body


def test_every_route_with_a_live_job_meets_no_500_and_bounded_memory(live_service: tuple[str, Live]) -> None:
    base, live = live_service
    service = live.procs["service"]
    auth = {"Authorization": f"Bearer {TOKEN}"}
    statuses: Counter[int] = Counter()
    admin_ok: Counter[str] = Counter()
    with httpx.Client(base_url=base, timeout=60) as client:
        spec = client.get("/openapi.json").json()
        ops = _operations(spec)
        assert len(ops) >= 18
        strategies = SchemaStrategies(spec)
        for _ in range(20):  # warm up (imports, first allocations) before the baseline
            client.get("/readyz")
            client.post("/v1/embeddings:lookup", json={"slot": "C1", "ids": [1, 2]})
        rss_before = _rss_mb(service.pid)

        @settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
        @given(data=st.data())
        def run(data: st.DataObject) -> None:
            method, path, op = data.draw(st.sampled_from(ops))
            url, query, body = draw_request(data, strategies, path, op)
            content = None if body is None else json.dumps(body).encode()
            headers = data.draw(st.sampled_from([auth, auth, auth, {}, {"Authorization": "Bearer x"}]))
            if content is not None:
                headers = {**headers, "content-type": "application/json"}
            if data.draw(st.integers(0, 9)) == 0:  # invented methods and paths must not grow anything
                method = data.draw(st.sampled_from(INVENTED))
                url = data.draw(st.sampled_from([url, f"/v1/{quote(data.draw(st.text(max_size=8)))}", "/admin/x"]))
            r = client.request(method, url, params=query, content=content, headers=headers)
            statuses[r.status_code] += 1
            assert r.status_code != 500 and r.status_code < 600, (method, url, content, r.text)
            if r.status_code >= 400 and r.content:
                err = r.json()["error"]
                assert set(err) == {"code", "message", "detail"} and err["message"], r.text
            elif path.startswith("/admin") and headers is auth:
                admin_ok[f"{method} {path}"] += 1

        run()
        grown = _rss_mb(service.pid) - rss_before
        metrics = client.get("/metrics").content
        status = client.get("/admin/status", headers=auth).json()
        ready = client.get("/readyz").status_code
    print(dict(statuses), dict(admin_ok), f"RSS +{grown:.0f} MB, /metrics {len(metrics)} bytes")
    assert all(p.poll() is None for p in live.procs.values()), live.logs()
    assert ready == 200
    assert status["job"]["connected"] and "status" in status["job"], status["job"]  # the control thread lives
    assert len(admin_ok) >= 5, admin_ok  # admin routes reached the live job with the valid token
    assert statuses[200] >= 20 and statuses[422] >= 20, statuses
    assert len(metrics) < METRICS_MAX_BYTES, len(metrics)
    assert grown < RSS_GROWTH_MB, f"service RSS grew by {grown:.0f} MB"
