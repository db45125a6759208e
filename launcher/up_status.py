"""What `streamrec up` shows: one snapshot of the running system, from the service's admin API
(job status proxied from the trainers, the served bundle) and the shards' own stats.

Every source is optional: a role that is still starting (or gone) leaves its fields None,
so the console keeps drawing while the system comes up and goes down.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from core.errors import StreamrecError
from ps.client import PSClient


def find_number(obj: Any, *keys: str, depth: int = 4) -> float | None:
    """The first number under any of ``keys``, searching ``obj`` breadth first."""
    level = [obj]
    for _ in range(depth):
        nxt = []
        for o in level:
            if not isinstance(o, dict):
                continue
            for k in keys:
                v = o.get(k)
                if isinstance(v, int | float) and not isinstance(v, bool):
                    return float(v)
            nxt += [v for v in o.values() if isinstance(v, dict)]
        level = nxt
    return None


@dataclass
class Snapshot:
    at: float
    api_url: str
    records: float | None = None
    records_per_s: float | None = None
    lag: float | None = None
    auc: float | None = None  # the running pass's, else the newest committed pass's
    auc_total: float | None = None  # over every record since the job started, as of the newest pass
    bayes_auc: float | None = None
    rows: int | None = None
    table_bytes: int | None = None
    admitted: int | None = None
    evicted: int | None = None
    last_pass: float | None = None
    last_export: float | None = None
    freshness_s: float | None = None
    bundle_version: int | None = None
    rejected: dict[str, int] = field(default_factory=dict)  # the chief's refused records by reason
    absent_fields: dict[str, int] = field(default_factory=dict)  # the chief's records lacking a required field
    roles: dict[str, str] = field(default_factory=dict)  # role -> "running" / "exited N"
    errors: list[str] = field(default_factory=list)


class StatusCollector:
    """Polls the admin API and the shards; keeps the previous record count for records/s."""

    def __init__(self, api_url: str, admin_token: str, ps: PSClient | None, *, bayes_auc: float | None,
                 end_offsets: Callable[[], int | None] | None = None) -> None:
        self.api_url = api_url
        self.token = admin_token
        self.ps = ps
        self.bayes_auc = bayes_auc
        self.end_offsets = end_offsets  # records ever produced to the topic (its end offsets, summed)
        self._prev: tuple[float, float] | None = None  # (created_at, records_total) of the last pass seen
        self._last_rate: float | None = None

    def admin_status(self, timeout_s: float = 2.0) -> dict[str, Any] | None:
        req = urllib.request.Request(f"{self.api_url}/admin/status", headers={"Authorization": f"Bearer {self.token}"})
        try:
            with urllib.request.urlopen(req, timeout=timeout_s) as r:
                return json.loads(r.read())
        except (OSError, urllib.error.URLError, ValueError):
            return None

    def collect(self) -> Snapshot:
        snap = Snapshot(at=time.time(), api_url=self.api_url, bayes_auc=self.bayes_auc)
        status = self.admin_status()
        if status is None:
            snap.errors.append("service not answering yet")
        else:
            self._from_status(snap, status)
        if self.ps is not None:
            self._from_shards(snap)
        return snap

    def _from_status(self, snap: Snapshot, status: dict[str, Any]) -> None:
        bundle = status.get("bundle") or {}
        snap.bundle_version = bundle.get("version")
        if (status.get("disk") or {}).get("state") == "disk full":  # service.disk: the trainer waits for space
            snap.errors.append("disk full: training waits for space, the API serves the last bundle")
        snap.freshness_s = find_number(bundle, "freshness_s")
        job = (status.get("job") or {}).get("status")
        if job is None:
            err = (status.get("job") or {}).get("error")
            if err:
                snap.errors.append(f"job: {err.get('message')}")
            return
        commit = job.get("last_commit") or {}
        snap.records = find_number(commit, "records_total")
        snap.records_per_s = self._rate(commit)
        snap.lag = find_number(job, "lag", "consumer_lag")
        snap.auc = find_number(job.get("progressive") or {}, "auc")
        if snap.auc is None:
            snap.auc = find_number(commit.get("metrics") or {}, "auc")
        snap.auc_total = find_number(job.get("last_point") or {}, "auc_total")  # trainer.pass_history
        snap.last_pass = find_number(job, "pass")
        snap.rejected = dict(job.get("rejected") or {})
        snap.absent_fields = dict(job.get("absent_fields") or {})
        last_export = job.get("last_export")
        if isinstance(last_export, int | float) and not isinstance(last_export, bool):
            snap.last_export = float(last_export)
        else:
            snap.last_export = find_number(last_export or commit.get("export") or {}, "version")
        if snap.lag is None and commit.get("offsets") is not None and self.end_offsets is not None:
            end = self.end_offsets()
            if end is not None:
                snap.lag = max(0.0, float(end - sum(int(o) for o in commit["offsets"].values())))

    def _rate(self, commit: dict[str, Any]) -> float | None:
        """Records/s of all workers together, from the last two committed passes (the chief's
        own counters see only its partitions)."""
        total, at = commit.get("records_total"), commit.get("created_at")
        if not isinstance(total, int | float) or not isinstance(at, int | float):
            return self._last_rate
        if self._prev is not None and at > self._prev[0]:
            self._last_rate = max(0.0, (total - self._prev[1]) / (at - self._prev[0]))
        if self._prev is None or at > self._prev[0]:
            self._prev = (at, total)
        return self._last_rate

    def _from_shards(self, snap: Snapshot) -> None:
        assert self.ps is not None
        try:
            shards = self.ps.admin.stats()
        except StreamrecError as err:
            snap.errors.append(f"shards: {err.message}")
            return
        tables = [t for s in shards for t in (s.get("tables") or {}).values()]
        snap.rows = sum(int(t.get("rows", 0)) for t in tables)
        snap.table_bytes = sum(int(t.get("bytes", 0)) for t in tables)
        snap.admitted = sum(int(t.get("admitted", 0)) for t in tables)
        snap.evicted = sum(int(t.get("evicted", 0)) for t in tables)
