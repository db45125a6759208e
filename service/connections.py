"""Connection deadlines for the service under uvicorn: what its HTTP/1.1 protocol leaves open.

uvicorn closes a kept-alive connection that stays idle after a response (``timeout_keep_alive``)
and answers 503 once ``limit_concurrency`` connections are open, but a connection that never
sends a complete request head is never closed and counts against that limit for as long as the
client holds it: a thousand silent sockets would make every request, ``/healthz`` included,
answer 503. :func:`uvicorn_options` gives uvicorn a protocol class that adds

- a header deadline: a connection must send a complete request head within ``header_timeout_s``
  of opening (or of its previous response), else it is closed;
- room for real requests: at ``max_connections`` a new connection closes the connection that has
  waited longest without a request in progress, so only connections busy with a request can
  fill the server (a new one is then answered 503, as before).

The request body's own deadline (the whole body, not each part) is the ASGI middleware's
(service.metrics.RequestMetricsMiddleware). Both closings are counted in :class:`ConnectionStats`.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

from service.settings import LimitSettings


@dataclass
class ConnectionStats:
    """Connections the guard closed, by cause (read by /metrics)."""

    header_timeouts: int = 0
    idle_closed_for_room: int = 0


@dataclass
class _Guard:
    header_timeout_s: float
    max_connections: int
    stats: ConnectionStats
    # connections with no request in progress, oldest first (dict: insertion-ordered, O(1) removal)
    idle: dict[GuardedH11Protocol, None] = field(default_factory=dict)


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a header deadline and idle connections making room at the limit."""

    guard: _Guard  # set per server by uvicorn_options

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._make_room()
        self._await_head()

    def connection_lost(self, exc: Exception | None) -> None:
        self._leave_idle()
        super().connection_lost(exc)

    def handle_events(self) -> None:
        super().handle_events()
        if not self._waiting_for_head():
            self._leave_idle()

    def on_response_complete(self) -> None:
        super().on_response_complete()  # may start a pipelined request
        if self._waiting_for_head() and not self.transport.is_closing():
            self._await_head()

    def _waiting_for_head(self) -> bool:
        return self.cycle is None or self.cycle.response_complete

    def _await_head(self) -> None:
        """Idle from now: the next request head is due within the header deadline."""
        self._cancel_deadline()
        self._head_deadline = self.loop.call_later(self.guard.header_timeout_s, self._head_overdue)
        self.guard.idle.pop(self, None)
        self.guard.idle[self] = None

    def _leave_idle(self) -> None:
        self._cancel_deadline()
        self.guard.idle.pop(self, None)

    def _cancel_deadline(self) -> None:
        if self._head_deadline is not None:
            self._head_deadline.cancel()
            self._head_deadline = None

    def _head_overdue(self) -> None:
        self._head_deadline = None
        if self._waiting_for_head() and not self.transport.is_closing():
            self.guard.stats.header_timeouts += 1
            self._close()

    def _make_room(self) -> None:
        """At the connection limit, close the longest-idle connections (never this new one)."""
        idle = self.guard.idle
        while len(self.connections) >= self.guard.max_connections and idle:
            self.guard.stats.idle_closed_for_room += 1
            next(iter(idle))._close()  # leaves ``idle`` as it closes

    def _close(self) -> None:
        self._leave_idle()
        # out of the server's count now: its connection_lost only comes on a later loop turn
        self.connections.discard(self)
        self.transport.close()


def uvicorn_options(limits: LimitSettings, stats: ConnectionStats) -> dict[str, Any]:
    """The keyword arguments of ``uvicorn.run`` that apply ``limits`` to connections."""
    guard = _Guard(limits.header_timeout_s, limits.max_connections, stats)
    protocol = type("GuardedH11", (GuardedH11Protocol,), {"guard": guard})
    return {"http": protocol, "limit_concurrency": limits.max_connections,
            "timeout_keep_alive": limits.keep_alive_s, "h11_max_incomplete_event_size": limits.max_head_bytes}
