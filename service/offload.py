"""A request's CPU-heavy work off the event loop: a large body's JSON decode, raw-value hashing,
big batches' features and scores run in worker threads (the hashing and parsing kernels release
the GIL), so ``/healthz`` and small requests keep answering beside a few large ones.

Bounded: at most ``work_threads`` jobs run and ``work_queue`` wait; past that a request is refused
at once with 503 rather than queueing without limit (each queued job holds a decoded body).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Coroutine
from typing import Annotated, Any, TypeVar

import anyio.to_thread
from anyio import CapacityLimiter
from fastapi import Depends, Request, Response
from fastapi.routing import APIRoute

from core.errors import Unavailable

T = TypeVar("T")
INLINE_BODY_BYTES = 64 << 10  # smaller bodies decode and hash in well under a millisecond: on the loop


class Offload:
    """Runs functions in a bounded set of worker threads (one per app, used from the event loop only)."""

    def __init__(self, threads: int, queue: int) -> None:
        self._limiter = CapacityLimiter(threads)
        self.capacity = threads + queue
        self.in_progress = 0  # jobs running or waiting for a thread
        self.refused = 0

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        if self.in_progress >= self.capacity:
            self.refused += 1
            raise Unavailable(f"busy: {self.in_progress} requests' work is running or waiting (work_threads + "
                              f"work_queue = {self.capacity}); retry later",
                              detail={"work_in_progress": self.in_progress, "capacity": self.capacity})
        self.in_progress += 1
        try:  # a cancelled request still waits for its thread: the job may hold a pinned bundle
            return await anyio.to_thread.run_sync(functools.partial(fn, *args), limiter=self._limiter)
        finally:
            self.in_progress -= 1


def is_small(request: Request) -> bool:
    """The body is small enough for its work to run on the event loop (chunked: not known, so not)."""
    length = request.headers.get("content-length", "")
    return length.isdigit() and int(length) <= INLINE_BODY_BYTES


class _OffloadedJsonRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_decoded"):
            body = await self.body()
            offload: Offload = self.app.state.offload
            self._decoded = json.loads(body) if len(body) <= INLINE_BODY_BYTES else await offload.run(json.loads, body)
        return self._decoded


class OffloadedBodyRoute(APIRoute):
    """A route whose large JSON body is decoded in a worker thread (FastAPI decodes on the loop)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def route_handler(request: Request) -> Response:
            return await handler(_OffloadedJsonRequest(request.scope, request.receive))

        return route_handler


async def get_offload(request: Request) -> Offload:
    return request.app.state.offload


OffloadDep = Annotated[Offload, Depends(get_offload)]
