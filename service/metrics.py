"""Prometheus text exposition, hand-rolled (a few counters, gauges and one histogram family),
plus the pure-ASGI middleware that times every request and enforces the body size limit."""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Callable
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from core.errors import InvalidInput

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class Histogram:
    def __init__(self, buckets: tuple[float, ...] = LATENCY_BUCKETS) -> None:
        self.buckets = buckets
        self.counts = [0] * (len(buckets) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.buckets, value)] += 1
        self.sum += value


def _labels(**kv: Any) -> str:
    return "{" + ",".join(f'{k}="{v!s}"' for k, v in kv.items()) + "}"


class Metrics:
    """Counters and histograms owned by one app; gauges are read from callables at scrape time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.latency: dict[tuple[str, str, int], Histogram] = {}
        self.errors: dict[str, int] = {}
        self.counters: dict[str, int] = {}
        self.gauges: dict[str, Callable[[], float | None]] = {}

    def observe_request(self, route: str, method: str, status: int, seconds: float) -> None:
        key = (route, method, status)
        h = self.latency.get(key)
        if h is None:
            h = self.latency.setdefault(key, Histogram())
        h.observe(seconds)

    def count_error(self, code: str) -> None:
        with self._lock:
            self.errors[code] = self.errors.get(code, 0) + 1

    def inc(self, name: str, by: int = 1) -> None:
        with self._lock:
            self.counters[name] = self.counters.get(name, 0) + by

    def gauge(self, name: str, read: Callable[[], float | None]) -> None:
        self.gauges[name] = read

    def render(self) -> str:
        out = ["# HELP streamrec_request_seconds request latency by route",
               "# TYPE streamrec_request_seconds histogram"]
        for (route, method, status), h in sorted(self.latency.items()):
            acc = 0
            for le, c in zip((*h.buckets, "+Inf"), h.counts, strict=True):
                acc += c
                bucket = _labels(route=route, method=method, status=status, le=le)
                out.append(f"streamrec_request_seconds_bucket{bucket} {acc}")
            lab = _labels(route=route, method=method, status=status)
            out += [f"streamrec_request_seconds_sum{lab} {h.sum:.6f}", f"streamrec_request_seconds_count{lab} {acc}"]
        out += ["# TYPE streamrec_errors_total counter"]
        out += [f"streamrec_errors_total{_labels(code=c)} {n}" for c, n in sorted(self.errors.items())]
        for name, n in sorted(self.counters.items()):
            out += [f"# TYPE streamrec_{name}_total counter", f"streamrec_{name}_total {n}"]
        for name, read in sorted(self.gauges.items()):
            value = read()
            if value is not None:
                out += [f"# TYPE streamrec_{name} gauge", f"streamrec_{name} {float(value):g}"]
        return "\n".join(out) + "\n"


def _counting(receive: Receive, limit: int) -> Receive:
    """``receive`` that refuses a body (chunked or lying about its length) past ``limit`` bytes."""
    seen = 0

    async def counted() -> Message:
        nonlocal seen
        message = await receive()
        if message["type"] == "http.request":
            seen += len(message.get("body", b""))
            if seen > limit:
                raise InvalidInput(f"request body exceeds {limit} bytes", detail={"max_body_bytes": limit})
        return message

    return counted


class RequestMetricsMiddleware:
    """Times each HTTP request under its route template and refuses bodies over the limit
    with 422 before the handler reads them."""

    def __init__(self, app: ASGIApp, metrics: Metrics, max_body_bytes: int) -> None:
        self.app = app
        self.metrics = metrics
        self.max_body = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        t0 = time.perf_counter()
        status = 500
        limit = self.max_body

        async def send_wrapper(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        if scope["method"] not in ("GET", "HEAD"):  # bodiless (hot single-id) requests skip the body checks
            for name, value in scope.get("headers", ()):
                if name == b"content-length" and value.isdigit() and int(value) > limit:
                    await self._too_large(send, int(value))
                    self.metrics.observe_request("<body-too-large>", scope["method"], 422, time.perf_counter() - t0)
                    return
            receive = _counting(receive, limit)
        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            route = scope.get("route")
            path = getattr(route, "path", "<unmatched>")
            self.metrics.observe_request(path, scope["method"], status, time.perf_counter() - t0)

    async def _too_large(self, send: Send, size: int) -> None:
        import json

        err = InvalidInput(f"request body of {size} bytes exceeds the limit of {self.max_body} bytes",
                           detail={"max_body_bytes": self.max_body, "body_bytes": size})
        body = json.dumps({"error": err.to_dict()}).encode()
        self.metrics.count_error(err.code)
        await send({"type": "http.response.start", "status": 422,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})
