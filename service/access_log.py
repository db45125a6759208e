"""The service's access log and request ids.

Every request gets an id: the caller's ``X-Request-ID`` when it is a plausible one (printable
ASCII, at most :data:`MAX_ID_CHARS`), else a new one. The id goes back in the response's
``X-Request-ID`` header, onto every line logged while the request is handled
(:data:`core.logs.request_id`, so an error's log line names it) and onto the request's
access-log line: method, path, status and duration in milliseconds, as logger
``service.access`` in the role's format. With ``logging.access_log`` on, successful requests
(status < 400) are written at the ``logging.access_sample`` rate and every failed one is written.

The line is formatted on the request's path with plain string formatting (no ``logging`` record)
and queued; one thread (:class:`AccessLogWriter`) writes what is queued in one write call to the
role's log. A request never waits for the log: when ``logging.access_queue_lines`` lines are
waiting its line is dropped and counted on /metrics. The app's shutdown writes what is left.

uvicorn's own access log is off (``streamrec serve``): its line has no duration and no id.
"""

from __future__ import annotations

import collections
import json
import logging
import random
import sys
import threading
import time
import uuid
from collections.abc import Callable

from starlette.types import ASGIApp, Receive, Scope, Send

from core.logs import LogFormat, LoggingConfig, json_object, request_id, role_handler, text_line
from service.metrics import ResponseStatus

log = logging.getLogger("service.access")

HEADER = b"x-request-id"
MAX_ID_CHARS = 128
BATCH_S = 0.05  # how long the writer gathers lines after the first before it writes them


def incoming_id(scope: Scope) -> str | None:
    """The caller's request id when it is safe to echo and log (no spaces or control characters)."""
    for name, value in scope.get("headers", ()):
        if name == HEADER:
            text = value.decode("latin-1")
            if 0 < len(text) <= MAX_ID_CHARS and text.isascii() and text.isprintable() and " " not in text:
                return text
            return None
    return None


class AccessLogWriter:
    """A bounded queue of formatted lines and the one thread that writes them, a batch a call, to
    the role's log (core.logs.configure; stderr before it is called)."""

    def __init__(self, max_lines: int) -> None:
        self.max_lines = max_lines
        self.full_drops = 0  # counted by the event loop only
        self.failed_lines = 0  # counted by the writer thread only
        self._lines: collections.deque[str] = collections.deque()
        self._wake = threading.Event()
        self._closing = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def dropped(self) -> int:
        """Lines never written: the queue was full, or their write failed."""
        return self.full_drops + self.failed_lines

    def put(self, line: str) -> None:
        """Queue one line (with its newline), or drop it when the queue is full; never blocks."""
        if len(self._lines) >= self.max_lines:
            self.full_drops += 1
            return
        self._lines.append(line)
        if not self._wake.is_set():  # the writer clears it before it drains: a line appended since is seen
            self._wake.set()

    def start(self) -> None:
        self._closing.clear()
        self._thread = threading.Thread(target=self._run, name="access-log", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Write every queued line, then stop the thread."""
        if self._thread is not None:
            self._closing.set()
            self._wake.set()
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        while True:
            self._wake.wait()
            # a write per request would cost a thread switch and a write call each: gather a batch first
            self._closing.wait(BATCH_S)
            closing = self._closing.is_set()
            self._wake.clear()
            batch = [self._lines.popleft() for _ in range(len(self._lines))]
            if batch:
                self._write("".join(batch), len(batch))
            if closing and not self._lines:
                return

    def _write(self, text: str, lines: int) -> None:
        handler = role_handler()
        stream = handler.stream if handler is not None else sys.stderr
        if handler is not None:
            handler.acquire()
        try:
            stream.write(text)
            stream.flush()
        except (OSError, ValueError):  # a full disk or a closed stream: counted, the service serves on
            self.failed_lines += lines
        finally:
            if handler is not None:
                handler.release()


class AccessLogMiddleware:
    """Outermost middleware: the request id and the access-log line (module docstring)."""

    def __init__(self, app: ASGIApp, *, config: LoggingConfig, writer: AccessLogWriter,
                 draw: Callable[[], float] = random.random) -> None:
        self.app = app
        self.config = config
        self.writer = writer
        self.draw = draw

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = incoming_id(scope) or uuid.uuid4().hex
        # left set: the context is this request's task's own, and the app's 500 handler runs after this returns
        request_id.set(rid)
        t0 = time.perf_counter()
        sent = ResponseStatus(send, (HEADER, rid.encode()))
        try:
            await self.app(scope, receive, sent)
        finally:
            self._write(scope, sent.status, time.perf_counter() - t0, rid)

    def _write(self, scope: Scope, status: int, seconds: float, rid: str) -> None:
        config = self.config
        if not config.access_log or (status < 400 and config.access_sample < 1.0 and
                                     self.draw() >= config.access_sample) or not log.isEnabledFor(logging.INFO):
            return
        ms = round(seconds * 1000.0, 2)
        method, path = scope["method"], scope["path"]
        message = f"{method} {path} {status} {ms:.2f} ms"
        if config.format is LogFormat.JSON:
            fields = {"method": method, "path": path, "status": status, "duration_ms": ms}
            line = json.dumps(json_object(time.time(), "INFO", log.name, message, rid, fields))
        else:
            line = text_line(time.time(), "INFO", log.name, message, rid)
        self.writer.put(line + "\n")
