"""``create_app(settings)``: the FastAPI app whose lifespan owns the model store (bundles,
tables, item index), the export watcher and the link to the training job."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import faiss
import numpy as np
from fastapi import FastAPI

from core.logs import LoggingConfig
from ps.auth import read_secret
from service.access_log import AccessLogMiddleware, AccessLogWriter
from service.cold_start import ColdStart
from service.connections import ConnectionStats
from service.disk import DiskView
from service.docs_pages import install_docs_pages
from service.errors import install_error_handler
from service.export_watcher import ExportWatcher
from service.job import JobLink
from service.json_rows import rows_json
from service.live_items import LiveItems
from service.metrics import RequestMetricsMiddleware, ServiceMetrics
from service.model_store import ModelStore
from service.offload import Offload
from service.openapi_examples import install_openapi_examples
from service.read_through import ReadThrough
from service.routes import admin, dashboard, embeddings, health, items, predict, recommend
from service.settings import ServiceSettings


def _register_gauges(metrics: ServiceMetrics, store: ModelStore, job: JobLink) -> None:
    def last(key: str) -> float | None:
        return store.history[-1][key] if store.history else None

    metrics.gauge("bundle_version", lambda: store.version)
    metrics.gauge("bundle_freshness_seconds", lambda: last("freshness_s"))
    metrics.gauge("bundle_apply_seconds", lambda: last("apply_seconds"))
    metrics.gauge("bundles_rejected", lambda: len(store.rejected))
    metrics.gauge("index_items", lambda: store.status()["items"])
    metrics.gauge("training_lag_records", job.training_lag_records)
    metrics.gauge("training_lag_seconds", job.training_lag_seconds)
    metrics.gauge("training_auc", job.auc)
    metrics.gauge("history_freshness_p50_seconds", lambda: job.history_freshness("p50"))
    metrics.gauge("history_freshness_p95_seconds", lambda: job.history_freshness("p95"))


def _register_live(metrics: ServiceMetrics, live: LiveItems) -> None:
    """The live path's freshness from the receipt of the records behind a change (item vector in
    the index; embedding row in the service's memory) and progress."""
    metrics.gauge("live_item_freshness_p50_seconds", lambda: live.freshness(0.5))
    metrics.gauge("live_item_freshness_p95_seconds", lambda: live.freshness(0.95))
    if live.read_through is not None:
        rows = live.read_through.overlay
        metrics.gauge("live_row_freshness_p50_seconds", lambda: rows.freshness(0.5))
        metrics.gauge("live_row_freshness_p95_seconds", lambda: rows.freshness(0.95))
    metrics.gauge("live_reached_timestamp_seconds", lambda: live.reached)
    metrics.gauge("live_paused", lambda: 0.0 if live.paused_at is None else 1.0)
    metrics.counter("live_items_refreshed", lambda: live.items_refreshed)
    metrics.counter("live_item_batches", lambda: live.batches)


def create_app(settings: ServiceSettings, *, log_config: LoggingConfig | None = None) -> FastAPI:
    """The app; ``log_config``: its access log (the role's ``logging`` section; default: every request)."""
    metrics = ServiceMetrics()
    log_config = log_config or LoggingConfig()
    access_log = AccessLogWriter(log_config.access_queue_lines)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # Faiss's OpenMP threads fight the event loop and each other on a small machine; batch
        # updates and single queries are fastest on one thread.
        faiss.omp_set_num_threads(1)
        rows_json(np.zeros((1, 1), np.float32))  # load the compiled JSON kernel before the first request
        # bundle loads (the watcher thread) and the live path's refresh run Python beside the
        # event loop: a thread waiting for the GIL gets it within 0.25 ms (default 5 ms). At 1 ms,
        # recommend's p99 while 20k rows/s flowed live was 1.14x the pass-bundle path's; at
        # 0.25 ms 0.98x (bench/serve.py --live-rate 20000, quiet machine)
        switch = sys.getswitchinterval()
        sys.setswitchinterval(0.00025)
        store = ModelStore(Path(settings.exports_dir), settings.index)
        watcher = ExportWatcher(store, settings.poll_seconds)
        job = JobLink(settings.job_control, settings.job_timeout_s, endpoint_file=settings.job_control_file,
                      secret=read_secret(settings.job_secret_file) if settings.job_secret_file else None)
        _register_gauges(metrics, store, job)
        app.state.disk = DiskView(store, job)  # disk space on /metrics and /admin/status
        app.state.disk.register(metrics)
        app.state.store, app.state.watcher, app.state.job = store, watcher, job
        app.state.read_through = ReadThrough(settings.read_through) if settings.read_through else None
        if app.state.read_through is not None:
            rt = app.state.read_through
            store.live_rows = rt  # the model inputs (recommend, predict) follow the live rows too
            metrics.counter("read_through_served", lambda: rt.served)
            metrics.counter("read_through_unavailable", lambda: rt.unavailable)
        cold = app.state.cold_start = ColdStart(settings.cold_start == "popular", app.state.read_through)
        metrics.counter("recommend_cold_start", lambda: cold.served)
        live = settings.read_through is not None and settings.read_through.live_items
        app.state.live = LiveItems(settings.read_through, store, app.state.read_through) if live else None
        if app.state.live is not None:
            _register_live(metrics, app.state.live)
        watcher.start()  # the first poll loads the newest bundle chain; /readyz tells when
        job.start()
        if app.state.live is not None:
            app.state.live.start()
        access_log.start()
        try:
            yield
        finally:
            if app.state.live is not None:
                app.state.live.stop()
            watcher.stop()
            job.stop()
            if app.state.read_through is not None:
                app.state.read_through.close()
            sys.setswitchinterval(switch)
            access_log.close()  # last: the lines of requests answered during the shutdown are written too

    app = FastAPI(title="streamrec service", version="0.1.0", lifespan=lifespan, docs_url=None, redoc_url=None,
                  description="Fresh embeddings, similar items, recommendations and CTR scores from the latest "
                              "exported bundle; the admin API operates the training job.")
    app.state.settings = settings
    app.state.metrics = metrics
    offload = app.state.offload = Offload(settings.limits.work_threads, settings.limits.work_queue)
    metrics.gauge("work_in_progress", lambda: offload.in_progress)
    metrics.counter("work_refused", lambda: offload.refused)
    metrics.counter("access_log_dropped", lambda: access_log.dropped)
    # filled by the connection guard when uvicorn serves the app (streamrec serve: service.connections)
    connections = app.state.connection_stats = ConnectionStats()
    metrics.counter("connections_header_timeout", lambda: connections.header_timeouts)
    metrics.counter("connections_closed_for_room", lambda: connections.idle_closed_for_room)
    install_error_handler(app)
    app.add_middleware(RequestMetricsMiddleware, metrics=metrics, max_body_bytes=settings.limits.max_body_bytes,
                       body_timeout_s=settings.limits.body_timeout_s)
    # added last, so outermost: a request refused by the one above is logged with its id too
    app.add_middleware(AccessLogMiddleware, config=log_config, writer=access_log)
    # hot routes first: the router tries routes in order
    for module in (embeddings, items, recommend, predict, health, admin, dashboard):
        app.include_router(module.router)
    install_docs_pages(app)
    install_openapi_examples(app)
    return app
