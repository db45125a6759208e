"""The service's access log and request ids.

Every request gets an id: the caller's ``X-Request-ID`` when it is a plausible one (printable
ASCII, at most :data:`MAX_ID_CHARS`), else a new one. The id goes back in the response's
``X-Request-ID`` header, onto every line logged while the request is handled
(:data:`core.logs.request_id`, so an error's log line names it) and onto the request's
access-log line: method, path, status and duration in milliseconds, on logger
``service.access``. With ``logging.access_log`` on, successful requests (status < 400) are
written at the ``logging.access_sample`` rate and every failed one is written.

uvicorn's own access log is off (``streamrec serve``): its line has no duration and no id.
"""

from __future__ import annotations

import logging
import random
import time
import uuid
from collections.abc import Callable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from core.logs import LoggingConfig, request_id

log = logging.getLogger("service.access")

HEADER = b"x-request-id"
MAX_ID_CHARS = 128


def incoming_id(scope: Scope) -> str | None:
    """The caller's request id when it is safe to echo and log (no spaces or control characters)."""
    for name, value in scope.get("headers", ()):
        if name == HEADER:
            text = value.decode("latin-1")
            if 0 < len(text) <= MAX_ID_CHARS and text.isascii() and text.isprintable() and " " not in text:
                return text
            return None
    return None


class AccessLogMiddleware:
    """Outermost middleware: the request id and the access-log line (module docstring)."""

    def __init__(self, app: ASGIApp, *, config: LoggingConfig, draw: Callable[[], float] = random.random) -> None:
        self.app = app
        self.config = config
        self.draw = draw

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = incoming_id(scope) or uuid.uuid4().hex
        # left set: the context is this request's task's own, and the app's 500 handler runs after this returns
        request_id.set(rid)
        t0 = time.perf_counter()
        status = 500  # an exception the app let through is answered 500 outside this middleware

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = list(message.get("headers", ()))
                if not any(name == HEADER for name, _ in headers):
                    message = {**message, "headers": [*headers, (HEADER, rid.encode())]}
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            self._write(scope, status, time.perf_counter() - t0, rid)

    def _write(self, scope: Scope, status: int, seconds: float, rid: str) -> None:
        config = self.config
        if not config.access_log or (status < 400 and config.access_sample < 1.0 and
                                     self.draw() >= config.access_sample):
            return
        ms = round(seconds * 1000.0, 2)
        log.info("%s %s %d %.2f ms", scope["method"], scope["path"], status, ms,
                 extra={"request_id": rid, "fields": {"method": scope["method"], "path": scope["path"],
                                                      "status": status, "duration_ms": ms}})
