"""The REST admin API (bearer token): operates the training job over its control channel and
the service's own bundle loading. Job calls block on ZeroMQ, so they run in worker threads."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.concurrency import run_in_threadpool
from pydantic import Field

from core.errors import StreamrecError
from ps.shard_policy import LASTS as RUNTIME_POLICY_LASTS
from service.auth import require_admin
from service.deps import JobDep, StoreDep, WatcherDep
from service.job import JobLink
from service.schemas import ADMIN_ERROR_RESPONSES, Strict
from tables.table_config import AdmissionConfig, EvictionConfig

log = logging.getLogger(__name__)
router = APIRouter(prefix="/admin", tags=["admin"], dependencies=[Depends(require_admin)],
                   responses=ADMIN_ERROR_RESPONSES)

TableName = Annotated[str, Path(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9_.\-]+$")]


class RollbackRequest(Strict):
    pass_: int = Field(alias="pass", ge=0, description="the committed pass to go back to")


class PolicyUpdate(Strict):
    admission: AdmissionConfig | None = None
    eviction: EvictionConfig | None = None
    dry_run: bool = Field(False, description="only report how many rows the eviction policy would evict")


@router.get("/status", summary="Job, passes, shards, lag, metrics and the served bundle")
async def status(store: StoreDep, job: JobDep, watcher: WatcherDep, request: Request) -> dict[str, Any]:
    live = request.app.state.live
    live_status = live.status() if live is not None else None
    # the served state: a bundle version plus how far the live updates reached (None: bundle only)
    served = {"version": store.version, "live": None if live_status is None else {
        k: live_status[k] for k in ("state", "cursors", "reached", "reached_age_s")}}
    out: dict[str, Any] = {"served": served, "bundle": store.status(), "live": live_status,
                           "watcher": {"polls": watcher.polls},
                           "job": {"connected": job.connected, "endpoint": job.endpoint},
                           # "disk full" while the trainer's writes fail; the service serves on
                           "disk": await run_in_threadpool(request.app.state.disk.status)}
    if job.connected:
        try:
            out["job"]["status"] = await run_in_threadpool(job.call, "status")
        except StreamrecError as err:  # the bundle side still reports when the job does not answer
            out["job"]["error"] = err.to_dict()
    return out


# Admin operations that are one job call without arguments: (method, path, job op, summary).
_PLAIN_OPS = (
    ("POST", "/checkpoint", "checkpoint", "Commit a pass now"),
    ("POST", "/export", "export", "Export an inference bundle now"),
    ("POST", "/shrink", "shrink", "Run eviction on every table now"),
    ("POST", "/ingestion/pause", "pause", "Stop consuming from Kafka (training idles)"),
    ("POST", "/ingestion/resume", "resume", "Resume consuming"),
)


def _plain(op: str) -> Callable[[JobLink], Awaitable[Any]]:
    async def endpoint(job: JobDep) -> Any:
        return await run_in_threadpool(job.call, op)

    endpoint.__name__ = op
    return endpoint


for _method, _path, _op, _summary in _PLAIN_OPS:
    router.add_api_route(_path, _plain(_op), methods=[_method], summary=_summary, name=_op)


@router.get("/passes", summary="The job's passes; with ?since=<pass id>, the learning curve after that pass")
async def passes(job: JobDep, since: Annotated[int | None, Query(ge=-1, le=2**53, description=(
        "return the stored series of pass points (trainer.pass_history: AUC per pass and cumulative, "
        "records/s, lag, freshness, rows, memory) after this pass id; -1: all of it"))] = None) -> Any:
    """Without ``since``: the manifests of the passes still on disk (a list, as before). With it:
    ``{since, keep, columns, points}``, points oldest first, bounded to the newest ``keep`` passes."""
    if since is None:
        return await run_in_threadpool(job.call, "passes")
    return await run_in_threadpool(job.call, "history", since=since)


@router.post("/rollback", summary="Roll the job back to a committed pass")
async def rollback(body: RollbackRequest, job: JobDep) -> Any:
    log.info("admin: rolling the job back to pass %d", body.pass_)
    result = await run_in_threadpool(job.call, "rollback", pass_id=body.pass_)
    log.info("admin: the job rolled back to pass %d", body.pass_)
    return result


@router.post("/reload", summary="Look for new bundles now and apply them")
async def reload(watcher: WatcherDep) -> dict[str, Any]:
    return await run_in_threadpool(watcher.poll_once)


@router.get("/tables/{name}/policy",
            summary="A table's admission, eviction, NaN and decay settings in force, each with its source: the YAML's "
                    "`ps.tables` or a runtime change")
async def get_policy(name: TableName, job: JobDep) -> Any:
    return await run_in_threadpool(job.call, "get_policy", table=name)


@router.put("/tables/{name}/policy", summary="Change admission/eviction (dry_run: count the rows it would evict)")
async def put_policy(name: TableName, body: PolicyUpdate, job: JobDep) -> Any:
    out = await run_in_threadpool(
        job.call, "put_policy", table=name,
        admission=body.admission.model_dump() if body.admission else None,
        eviction=body.eviction.model_dump() if body.eviction else None, dry_run=body.dry_run)
    if isinstance(out, dict) and out.get("applied"):
        out = {**out, "lasts": RUNTIME_POLICY_LASTS}  # the shards' rule (ps.shard_policy)
    return out
