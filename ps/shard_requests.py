"""What every shard handler shares: the checks on a request's arrays, the ok reply, the
outbox that answers a client now or later (a barrier's or a save's reply is deferred, every
reply carries the shard's incarnation), and the refusal log (every refusal counted, the log
bounded)."""

from __future__ import annotations

import errno
import logging
import threading
import time
from collections import Counter
from typing import Any

import numpy as np
import zmq

from core.errors import InvalidInput, StreamrecError
from ps import protocol
from ps.protocol import Message


def ok(msg: Message, *arrays: np.ndarray, meta: dict[str, Any] | None = None) -> Message:
    """The success reply to ``msg``."""
    return Message(msg.op, msg.request_id, msg.table, arrays=list(arrays), meta=meta or {})


def arrays_of(msg: Message, *counts: int) -> list[np.ndarray]:
    """``msg``'s arrays, when it carries one of ``counts`` of them."""
    if len(msg.arrays) not in counts:
        wanted = " or ".join(map(str, counts))
        raise InvalidInput(f"{msg.op.name.lower()} takes {wanted} arrays, got {len(msg.arrays)}")
    return msg.arrays


# Why a reply could not be queued: its peer's queue is full (it sends without reading), or the
# peer disconnected. A ROUTER drops such replies silently; the shard's socket is made to say so
# (ROUTER_MANDATORY) and never to block on one peer (DONTWAIT), and the drop is counted here.
_DROPPED = {errno.EAGAIN: "peer_not_reading", errno.EHOSTUNREACH: "peer_gone"}
# Replies queued per peer (the ROUTER's SNDHWM; ZeroMQ's default 1,000): a client may keep thousands of
# requests in flight, whose replies wait here while it sends; a peer that never reads holds at most
# this many (junk's error replies are ~60 bytes: ~1 MB).
REPLIES_QUEUED_PER_PEER = 16_384
_FIRST = zmq.SNDMORE | zmq.DONTWAIT


class Outbox:
    """Replies through the shard's ROUTER socket, addressed by client identity (loop thread only),
    each stamped with the shard's ``incarnation``. A reply its peer cannot take now is dropped
    and counted in ``dropped`` by reason: the loop never waits for one client (the client's
    transport resends after its timeout)."""

    def __init__(self, sock: zmq.Socket, incarnation: int) -> None:
        sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self._sock = sock
        self.incarnation = incarnation
        self.dropped: Counter[str] = Counter()

    def reply(self, ident: bytes, msg: Message) -> None:
        msg.incarnation = self.incarnation
        frames = protocol.encode(msg)
        if len(frames) == 1:  # a small reply: copied, two sends without the multipart loop
            self.send_frame(ident, frames[0])
        else:  # zero-copy pays off only for big frames
            self.send(ident, frames, copy=False)

    def send_frame(self, ident: bytes, frame: Any) -> None:
        """One frame already encoded, stamped with this outbox's incarnation (a small pull's reply)."""
        if self._routed(ident):
            self._sock.send(frame)

    def send(self, ident: bytes, frames: list[Any], *, copy: bool = True) -> None:
        """Frames already encoded (a save's outcome, kept for every client that asks)."""
        if self._routed(ident):  # the rest of a routed message is queued whole: ZeroMQ sends it atomically
            self._sock.send_multipart(frames, copy=copy)

    def error(self, ident: bytes, op: int, request_id: int, err: StreamrecError) -> None:
        self.send(ident, protocol.error_reply(op, request_id, err, incarnation=self.incarnation))

    def _routed(self, ident: bytes) -> bool:
        """Send the identity frame that opens a reply to ``ident``; False (counted) when it cannot go."""
        try:
            self._sock.send(ident, _FIRST)
        except zmq.ZMQError as exc:
            reason = _DROPPED.get(exc.errno)
            if reason is None:
                raise
            self.dropped[reason] += 1
            return False
        return True


# A refusal's detail key: the request came on the old connection of a client that reconnected under
# its routing id, which the client resends; counted under its own code and logged at info, since every
# reconnect of a busy client makes some and they are no sign of a wrong secret or a foreign peer.
REPLACED_CONNECTION = "replaced_connection"


class RefusalLog:
    """Counts every refused request by error code; logs the first ``burst`` refusals of each
    ``interval_s``, then one summary line per interval for the rest (junk at any rate writes a
    bounded log). Thread-safe: a save thread counts its failure too."""

    def __init__(self, log: logging.Logger, prefix: str, *, burst: int = 10, interval_s: float = 60.0,
                 clock: Any = time.monotonic) -> None:
        self._log, self._prefix, self._burst, self._interval, self._clock = log, prefix, burst, interval_s, clock
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._window_start = clock()
        self._logged = 0
        self._quiet: Counter[str] = Counter()  # refusals of this interval not logged one by one

    def refused(self, err: StreamrecError) -> None:
        if err.detail.get(REPLACED_CONNECTION):
            with self._lock:
                self.counts[REPLACED_CONNECTION] += 1
            self._log.info("%s dropped a request: %s", self._prefix, err.message)
            return
        with self._lock:
            self.counts[err.code] += 1
            now = self._clock()
            if now - self._window_start >= self._interval:
                self._summarize(now)
            if self._logged < self._burst:
                self._logged += 1
                self._log.warning("%s refused a request: %s", self._prefix, err.message)
            else:
                self._quiet[err.code] += 1

    def _summarize(self, now: float) -> None:
        if self._quiet:
            self._log.warning("%s refused %d more requests in the last %.0f s without logging each: %s",
                              self._prefix, sum(self._quiet.values()), now - self._window_start, dict(self._quiet))
        self._quiet.clear()
        self._logged = 0
        self._window_start = now
