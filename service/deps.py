"""Typed FastAPI dependencies: the lifespan's objects, read from app.state."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from service.export_watcher import ExportWatcher
from service.job import JobLink
from service.metrics import ServiceMetrics
from service.model_store import ModelStore
from service.settings import LimitSettings, PopularityPriorSettings, ServiceSettings


async def get_store(request: Request) -> ModelStore:
    return request.app.state.store


async def get_watcher(request: Request) -> ExportWatcher:
    return request.app.state.watcher


async def get_job(request: Request) -> JobLink:
    return request.app.state.job


async def get_metrics(request: Request) -> ServiceMetrics:
    return request.app.state.metrics


async def get_settings(request: Request) -> ServiceSettings:
    return request.app.state.settings


async def get_limits(request: Request) -> LimitSettings:
    return request.app.state.settings.limits


async def get_prior(request: Request) -> PopularityPriorSettings:
    return request.app.state.settings.popularity_prior


StoreDep = Annotated[ModelStore, Depends(get_store)]
WatcherDep = Annotated[ExportWatcher, Depends(get_watcher)]
JobDep = Annotated[JobLink, Depends(get_job)]
MetricsDep = Annotated[ServiceMetrics, Depends(get_metrics)]
SettingsDep = Annotated[ServiceSettings, Depends(get_settings)]
LimitsDep = Annotated[LimitSettings, Depends(get_limits)]
PriorDep = Annotated[PopularityPriorSettings, Depends(get_prior)]
