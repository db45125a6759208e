"""The service's Prometheus metrics (prometheus-client, one registry per app, no global state),
plus the pure-ASGI middleware that times every request and bounds how requests use the server.

Every label value comes from a closed set, so no client can grow the exposition: the route is
the matched route template (or ``<unmatched>``), the method one of the HTTP methods (anything
else is ``other``), the status an HTTP status, the error code a class of core.errors.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator

from prometheus_client import Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from core.errors import InvalidInput, RequestTimeout
from core.role_registry import role_registry
from service.metric_help import HELP

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
HTTP_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
EXPOSITION_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class _ReadAtScrape(Collector):
    """Gauges and counters whose values live elsewhere (the store, the job link): read when scraped."""

    def __init__(self) -> None:
        self.gauges: dict[str, Callable[[], float | None]] = {}
        self.counters: dict[str, Callable[[], float | None]] = {}

    def collect(self) -> Iterator[Metric]:
        for name, read in sorted(self.gauges.items()):
            value = read()
            if value is not None:
                yield GaugeMetricFamily(f"streamrec_{name}", HELP[name], value=float(value))
        for name, read in sorted(self.counters.items()):
            value = read()
            if value is not None:
                yield CounterMetricFamily(f"streamrec_{name}", HELP[name], value=float(value))


class ServiceMetrics:
    """The metrics of one app; ``render()`` is the exposition ``/metrics`` serves."""

    def __init__(self) -> None:
        self.registry = role_registry("service")
        self._latency = Histogram("streamrec_request_seconds", "Seconds from a request's head to its response's "
                                  "end, by route template (<unmatched>: no route), method and status",
                                  ("route", "method", "status"), buckets=LATENCY_BUCKETS, registry=self.registry)
        self._errors = Counter("streamrec_errors", "Error responses, by error class of core.errors; a 404 of a "
                               "path no route serves (a browser's favicon) is not counted", ("code",),
                               registry=self.registry)
        self._read = _ReadAtScrape()
        self.registry.register(self._read)
        self.requests_in_progress = 0  # from the head's arrival to the response's end (the event loop's only)
        self.gauge("requests_in_progress", lambda: self.requests_in_progress)

    def observe_request(self, route: str, method: str, status: int, seconds: float) -> None:
        method = method if method in HTTP_METHODS else "other"  # invented methods must not add series
        self._latency.labels(route, method, str(status)).observe(seconds)

    def count_error(self, code: str) -> None:
        self._errors.labels(code).inc()

    def gauge(self, name: str, read: Callable[[], float | None]) -> None:
        """``streamrec_<name>``, the value ``read()`` returns at scrape time (None: not exposed)."""
        self._read.gauges[_described(name)] = read

    def counter(self, name: str, read: Callable[[], float | None]) -> None:
        """``streamrec_<name>_total``, a running count kept elsewhere and read at scrape time."""
        self._read.counters[_described(name)] = read

    def render(self) -> bytes:
        return generate_latest(self.registry)


def _described(name: str) -> str:
    if name not in HELP:
        raise KeyError(f"streamrec_{name} has no HELP text: add it to service.metric_help.HELP")
    return name


def _counting(receive: Receive, limit: int, timeout_s: float) -> Receive:
    """``receive`` that refuses a body (chunked or lying about its length) past ``limit`` bytes,
    or one whose last part has not arrived ``timeout_s`` after the request's head: a deadline on
    the whole body, since a client trickling a byte at a time would pass any per-part timeout
    while it holds a connection and its buffers (slowloris)."""
    seen = 0
    deadline = asyncio.get_running_loop().time() + timeout_s
    complete = False

    async def counted() -> Message:
        nonlocal seen, complete
        if complete:  # past the body only the disconnect is left to wait for, for as long as the app likes
            return await receive()
        try:  # asyncio.timeout_at, not wait_for: no task per body part (~tens of us on every POST)
            async with asyncio.timeout_at(deadline):
                message = await receive()
        except TimeoutError:
            raise RequestTimeout(f"request body not received within {timeout_s:g} s of the request's head",
                                 detail={"body_timeout_s": timeout_s, "body_bytes_received": seen}) from None
        if message["type"] == "http.request":
            seen += len(message.get("body", b""))
            if seen > limit:
                raise InvalidInput(f"request body exceeds {limit} bytes", detail={"max_body_bytes": limit})
            complete = not message.get("more_body", False)
        return message

    return counted


class ResponseStatus:
    """An ASGI ``send`` that notes the status of the response it passes on and adds ``header``
    to the response's head unless the app set it. The status is 500 until a head is sent: an
    exception the app let through is answered 500 outside the middleware that reads it."""

    __slots__ = ("header", "send", "status")

    def __init__(self, send: Send, header: tuple[bytes, bytes] | None = None) -> None:
        self.send = send
        self.header = header
        self.status = 500

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
            if self.header is not None:
                headers = list(message.get("headers", ()))
                if not any(name == self.header[0] for name, _ in headers):
                    message = {**message, "headers": [*headers, self.header]}
        await self.send(message)


class RequestMetricsMiddleware:
    """Times each HTTP request under its route template and refuses bodies over the limit
    with 422 before the handler reads them."""

    def __init__(self, app: ASGIApp, metrics: ServiceMetrics, max_body_bytes: int, body_timeout_s: float) -> None:
        self.app = app
        self.metrics = metrics
        self.max_body = max_body_bytes
        self.body_timeout_s = body_timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        t0 = time.perf_counter()
        limit = self.max_body
        if scope["method"] not in ("GET", "HEAD"):  # bodiless (hot single-id) requests skip the body checks
            for name, value in scope.get("headers", ()):
                if name == b"content-length" and value.isdigit() and int(value) > limit:
                    await self._too_large(send, int(value))
                    self.metrics.observe_request("<body-too-large>", scope["method"], 422, time.perf_counter() - t0)
                    return
            receive = _counting(receive, limit, self.body_timeout_s)
        self.metrics.requests_in_progress += 1
        sent = ResponseStatus(send)
        try:
            await self.app(scope, receive, sent)
        finally:
            self.metrics.requests_in_progress -= 1
            route = scope.get("route")
            path = getattr(route, "path", "<unmatched>")
            self.metrics.observe_request(path, scope["method"], sent.status, time.perf_counter() - t0)

    async def _too_large(self, send: Send, size: int) -> None:
        import json

        err = InvalidInput(f"request body of {size} bytes exceeds the limit of {self.max_body} bytes",
                           detail={"max_body_bytes": self.max_body, "body_bytes": size})
        body = json.dumps({"error": err.to_dict()}).encode()
        self.metrics.count_error(err.code)
        await send({"type": "http.response.start", "status": 422,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})
