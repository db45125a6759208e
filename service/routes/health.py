"""Liveness, readiness (a bundle is loaded) and Prometheus metrics."""

from __future__ import annotations

from fastapi import APIRouter, Response

from core.errors import Unavailable
from service.deps import MetricsDep, StoreDep
from service.metrics import EXPOSITION_TYPE
from service.schemas import ERROR_RESPONSES

router = APIRouter(tags=["health"])


@router.get("/healthz", summary="The process is up")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", summary="Ready once a bundle is loaded", responses={503: ERROR_RESPONSES[503]})
async def readyz(store: StoreDep) -> dict[str, object]:
    if not store.ready:
        raise Unavailable("no bundle loaded yet", detail={"exports_dir": str(store.root),
                                                          "last_error": store.last_error})
    return {"status": "ready", "version": store.version}


@router.get("/metrics", summary="Prometheus text exposition", response_class=Response)
async def metrics(m: MetricsDep) -> Response:
    return Response(m.render(), media_type=EXPOSITION_TYPE)
