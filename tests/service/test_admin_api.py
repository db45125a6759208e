"""The admin API against a real job control server (jobcontrol.channel) whose handler runs real
sparse tables: tokens are enforced, ops reach the job, job errors keep their HTTP status."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from core.errors import NotFound
from jobcontrol.channel import ControlServer
from tables.sparse_table import SparseTable
from tables.table_config import EvictionConfig, TableConfig

from .service_support import BundleBuilder, auth, make_settings, started, wait_until

ADMIN_CALLS = [
    ("GET", "/admin/status", None), ("GET", "/admin/passes", None), ("POST", "/admin/checkpoint", None),
    ("POST", "/admin/export", None), ("POST", "/admin/shrink", None), ("POST", "/admin/rollback", {"pass": 2}),
    ("POST", "/admin/reload", None), ("GET", "/admin/tables/emb8/policy", None),
    ("PUT", "/admin/tables/emb8/policy", {"eviction": {"ttl_passes": 3}, "dry_run": True}),
    ("POST", "/admin/ingestion/pause", None), ("POST", "/admin/ingestion/resume", None),
]


class TableJob:
    """A small training job: one real table, passes committed on demand."""

    def __init__(self) -> None:
        self.table = SparseTable(TableConfig(name="emb8", dim=8))
        self.table.push(np.arange(1, 101, dtype=np.uint64), np.zeros((100, 8), np.float32))
        self.table.end_pass()
        self.table.push(np.arange(1, 41, dtype=np.uint64), np.zeros((40, 8), np.float32))  # 60 ids idle for a pass
        self.committed: list[int] = []
        self.paused = False
        self.exports = 0
        self.policy: dict[str, Any] = {"admission": {"policy": "always"}, "eviction": {}}

    def _table(self, table: str) -> SparseTable:
        if table != self.table.name:
            raise NotFound(f"no table {table!r}")
        return self.table

    def status(self) -> dict[str, Any]:
        return {"job": "test", "paused": self.paused, "passes": self.committed, "lag": 42,
                "progressive": {"auc": 0.75}, "newest_record_time": time.time() - 30.0,
                "history_freshness_p50_s": 0.25, "history_freshness_p95_s": 0.5,
                "shards": [{"rows": self.table.size()}]}

    def passes(self) -> list[dict[str, Any]]:
        return [{"pass": p, "complete": True} for p in self.committed]

    def checkpoint(self) -> dict[str, Any]:
        self.committed.append(self.table.end_pass())
        return {"pass": self.committed[-1]}

    def export(self) -> dict[str, Any]:
        self.exports += 1
        return {"exports": self.exports}

    def shrink(self) -> dict[str, Any]:
        return {"evicted": self.table.shrink()}

    def rollback(self, pass_id: int) -> dict[str, Any]:
        if pass_id not in self.committed:
            raise NotFound(f"pass {pass_id} is not committed", detail={"passes": self.committed})
        return {"pass": pass_id}

    def pause(self) -> dict[str, Any]:
        self.paused = True
        return {"paused": True}

    def resume(self) -> dict[str, Any]:
        self.paused = False
        return {"paused": False}

    def get_policy(self, table: str) -> dict[str, Any]:
        self._table(table)
        return self.policy

    def put_policy(self, table: str, admission: dict | None, eviction: dict | None, dry_run: bool) -> dict[str, Any]:
        t = self._table(table)
        policy = EvictionConfig.model_validate(eviction or self.policy["eviction"])
        would = t.shrink(policy=policy, dry_run=True)
        if not dry_run:
            self.policy = {"admission": admission or self.policy["admission"], "eviction": policy.model_dump()}
        return {"dry_run": dry_run, "would_evict": would, "rows": t.size()}


@pytest.fixture
def job() -> Iterator[TableJob]:
    handler = TableJob()
    server = ControlServer(handler).start()
    handler.endpoint = server.endpoint
    yield handler
    server.stop()


@pytest.fixture
def admin_client(builder: BundleBuilder, job: TableJob) -> Iterator[TestClient]:
    with started(make_settings(builder.root, job_control=job.endpoint)) as c:
        yield c


def test_admin_refuses_missing_or_wrong_tokens(admin_client: TestClient) -> None:
    for method, path, body in ADMIN_CALLS:
        r = admin_client.request(method, path, json=body)
        assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized", path
        assert r.headers["www-authenticate"] == "Bearer"
        r = admin_client.request(method, path, json=body, headers=auth("wrong"))
        assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden", path
        r = admin_client.request(method, path, json=body, headers={"Authorization": "Basic abc"})
        assert r.status_code in (401, 403), path
        r = admin_client.request(method, path, json=body, headers=auth())
        assert r.status_code == 200, (path, r.text)


def test_admin_ops_reach_the_job(admin_client: TestClient, job: TableJob) -> None:
    status = admin_client.get("/admin/status", headers=auth()).json()
    assert status["job"]["status"]["lag"] == 42 and status["bundle"]["version"] == 1
    assert admin_client.post("/admin/checkpoint", headers=auth()).json() == {"pass": 2}
    assert admin_client.get("/admin/passes", headers=auth()).json() == [{"pass": 2, "complete": True}]
    assert admin_client.post("/admin/rollback", json={"pass": 2}, headers=auth()).json() == {"pass": 2}
    r = admin_client.post("/admin/rollback", json={"pass": 9}, headers=auth())
    assert r.status_code == 404 and "pass 9" in r.json()["error"]["message"]
    assert admin_client.post("/admin/ingestion/pause", headers=auth()).json() == {"paused": True} and job.paused
    admin_client.post("/admin/ingestion/resume", headers=auth())
    assert not job.paused
    # a dry run reports what a policy would evict and evicts nothing
    r = admin_client.put("/admin/tables/emb8/policy", headers=auth(),
                         json={"eviction": {"ttl_passes": 1}, "dry_run": True})
    assert r.json() == {"dry_run": True, "would_evict": 60, "rows": 100}
    r = admin_client.put("/admin/tables/emb8/policy", headers=auth(),
                         json={"admission": {"policy": "count", "min_count": 2}, "eviction": {"max_rows": 10}})
    assert r.json()["dry_run"] is False
    got = admin_client.get("/admin/tables/emb8/policy", headers=auth()).json()
    assert got["admission"]["min_count"] == 2 and got["eviction"]["max_rows"] == 10
    assert admin_client.post("/admin/shrink", headers=auth()).json() == {"evicted": 0}
    assert admin_client.get("/admin/tables/nope/policy", headers=auth()).status_code == 404
    for bad in ({"eviction": {"ttl_passes": -1}}, {"admission": {"policy": "sometimes"}}, {"dry_run": "maybe"}):
        r = admin_client.put("/admin/tables/emb8/policy", headers=auth(), json=bad)
        assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_input", bad
    wait_until(lambda: "streamrec_training_lag_records 42" in admin_client.get("/metrics").text, what="job metrics")
    metrics = admin_client.get("/metrics").text
    assert "streamrec_training_auc 0.75" in metrics
    assert "streamrec_history_freshness_p50_seconds 0.25" in metrics  # the served history's, from the chief
    assert "streamrec_history_freshness_p95_seconds 0.5" in metrics
    lag_s = next(float(line.split()[1]) for line in metrics.splitlines()
                 if line.startswith("streamrec_training_lag_seconds "))
    assert 30.0 <= lag_s < 300.0


def test_admin_without_a_job_answers_503_but_reports_the_bundle(client: TestClient) -> None:
    r = client.post("/admin/checkpoint", headers=auth())
    assert r.status_code == 503 and "no training job connected" in r.json()["error"]["message"]
    status = client.get("/admin/status", headers=auth()).json()
    assert status["job"]["connected"] is False and status["bundle"]["version"] == 1


def test_unreachable_job_is_503_not_a_hang(builder: BundleBuilder) -> None:
    settings = make_settings(builder.root, job_control="tcp://127.0.0.1:9", job_timeout_s=0.3)
    with started(settings) as c:
        r = c.post("/admin/export", headers=auth())
        assert r.status_code == 503 and r.json()["error"]["code"] == "unavailable"
        status = c.get("/admin/status", headers=auth()).json()
        assert status["bundle"]["version"] == 1 and status["job"]["error"]["code"] == "unavailable"
