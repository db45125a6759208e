"""The client side of the wire: one DEALER socket per shard, requests in flight, resends.

Each shard gets a DEALER socket with a stable identity, so the shard keeps one ordered
connection per client: requests to one shard are applied in the order they were sent.
When a shard does not answer within the request's timeout the socket is rebuilt
(reconnecting when the shard is back) and every pending request to it is resent, in its
original order, with the RETRY flag, so the shard applies a mutating request at most once;
after ``retries`` resends :class:`Unavailable` names the shard and its endpoint. A request
the shard refused as signed before it started (queued here while it was down; the refusal
says ``resign``) is sent again at once, signed afresh (once: the shard is up now).

Every reply carries the shard's incarnation. The transport records each shard's; when a
reply comes from another incarnation than the one recorded, the shard restarted in between
(from its last save: updates since are gone), and the next :meth:`Transport.collect` that
reports restarts (the data plane's; control calls do not, so a regroup's own calls go
through) raises :class:`ShardRestarted` naming the shard, once per restart.

A transport is not thread-safe: :class:`ps.client.PSClient` and :class:`ps.admin.PSAdmin`
built on one transport belong to one thread.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import zmq

from core.errors import InvalidInput, ShardRestarted, Unavailable, error_from_code
from ps import protocol
from ps.auth import sign
from ps.protocol import Flag, Message, Op
from ps.ps_config import ClientConfig

_MAX_WAIT_MS = 1 << 30  # ZMQ_RCVTIMEO is a C int
_NOBLOCK_MORE = zmq.NOBLOCK | zmq.SNDMORE


@dataclass(slots=True)
class _Pending:
    shard: int
    msg: Message
    deadline: float
    timeout_s: float
    attempts: int = 1
    resigned: bool = False  # sent again once because the shard started after it was signed


class Transport:
    """Sends requests to ``endpoints`` (shard ``i`` at ``endpoints[i]``) and collects replies."""

    def __init__(self, endpoints: Sequence[str], *, config: ClientConfig | None = None,
                 secret: bytes | None = None) -> None:
        if not endpoints:
            raise InvalidInput("a PS client needs at least one shard endpoint")
        self.endpoints = list(endpoints)
        self.config = config or ClientConfig()
        self._timeout_s = self.config.timeout_s
        self._secret = secret
        self._identity = b"c" + os.urandom(8)
        self._ctx = zmq.Context()
        self._socks = [self._connect(i) for i in range(len(self.endpoints))]
        self._waits_ms = [-1] * len(self.endpoints)  # each socket's RCVTIMEO as last set (-1: libzmq's default)
        self._ids = itertools.count(1)
        self._pending: dict[int, _Pending] = {}  # insertion order is send order: resends keep it
        self._done: dict[int, Message] = {}
        self.incarnations: dict[int, int] = {}  # shard -> the incarnation its replies carry
        self._restarted: ShardRestarted | None = None  # seen, not raised yet

    @property
    def n_shards(self) -> int:
        return len(self.endpoints)

    def request(self, shard: int, op: Op, table: str = "", arrays: Sequence[np.ndarray] = (),
                meta: dict[str, Any] | None = None, flags: Flag = Flag.NONE, timeout_s: float | None = None) -> int:
        """Send one request to ``shard``; returns its request id for :meth:`collect`."""
        rid = next(self._ids)
        msg = Message(op, rid, table, arrays if type(arrays) is list else list(arrays), meta or {}, flags)
        timeout = timeout_s or self._timeout_s
        self._pending[rid] = _Pending(shard, msg, time.monotonic() + timeout, timeout)
        self._transmit(shard, msg)
        return rid

    def collect(self, request_ids: Sequence[int], *, report_restart: bool = True) -> list[Message]:
        """Replies for ``request_ids`` in order; raises the first error reply as its error class.
        ``report_restart``: raise a shard restart seen since the last report, once every reply arrived."""
        pending, done = self._pending, self._done
        try:
            for rid in request_ids:
                if rid not in pending and rid not in done:  # e.g. a ticket waited for again after its wait raised
                    lost = [r for r in request_ids if r not in pending and r not in done]
                    raise Unavailable(f"requests {lost} were abandoned when an earlier wait on them failed; "
                                      "start them again", detail={"request_ids": lost})
            self._receive(request_ids)
            if report_restart and self._restarted is not None:
                restarted, self._restarted = self._restarted, None
                raise restarted
        except Unavailable:
            for rid in request_ids:  # abandon the whole request: late replies to its other parts are dropped
                self._pending.pop(rid, None)
                self._done.pop(rid, None)
            raise
        replies = [done.pop(rid) for rid in request_ids]
        for reply in replies:
            if reply.status:  # not STATUS_OK
                err = error_from_code(reply.meta.get("code", "internal_error"), reply.meta.get("message", "?"),
                                      reply.meta.get("detail"))
                err.detail.setdefault("request_id", reply.request_id)
                raise err
        return replies

    def ask_every_shard(self, op: Op, metas: Sequence[dict[str, Any]] | None = None, *, flags: Flag = Flag.NONE,
                        timeout_s: float | None = None) -> list[dict[str, Any]]:
        """``op`` on every shard (shard ``i`` gets ``metas[i]``); each shard's reply meta (a
        control call: a shard restart is left for the data plane to report)."""
        rids = [self.request(s, op, meta=None if metas is None else metas[s], flags=flags, timeout_s=timeout_s)
                for s in range(self.n_shards)]
        return [r.meta for r in self.collect(rids, report_restart=False)]

    def take_restart(self) -> ShardRestarted | None:
        """The shard restart seen and not reported yet, now taken: no wait reports it."""
        restarted, self._restarted = self._restarted, None
        return restarted

    def close(self) -> None:
        # every socket of the context, not only the listed ones: one an exception left between its
        # creation and its place in _socks (a signal, in _retry_or_fail) would make term() wait forever
        self._ctx.destroy(linger=0)

    # ---------------------------------------------------------------- sockets
    def _connect(self, shard: int) -> zmq.Socket:
        sock = self._ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.IDENTITY, self._identity)
        sock.setsockopt(zmq.LINGER, 0)
        # No queue bound of ZeroMQ's own: what is in flight is bounded by the callers' tickets. At the
        # default 1,000 messages, a send past it failed (EAGAIN) and the request waited out its whole
        # timeout to be resent: 2,000 pulls in flight took 3.1 s per 1,000, 500 in flight 0.018 s;
        # and unread replies past it filled the shard's queue to this peer, which drops (and counts)
        # replies beyond it. A rebuilt socket drops what the old one queued.
        sock.setsockopt(zmq.SNDHWM, 0)
        sock.setsockopt(zmq.RCVHWM, 0)
        sock.connect(self.endpoints[shard])
        return sock

    def _transmit(self, shard: int, msg: Message) -> None:
        secret = self._secret
        frames = protocol.encode(msg, auth=secret is not None)
        sock = self._socks[shard]
        try:
            if secret is not None:
                tag = sign(secret, frames, identity=self._identity)
                if len(frames) == 1:  # a small signed request: two copied frames, no multipart loop
                    sock.send(frames[0], _NOBLOCK_MORE)
                    sock.send(tag, zmq.NOBLOCK)
                    return
                frames.append(tag)
            if len(frames) == 1:  # a small request: one copied frame, no multipart loop
                sock.send(frames[0], zmq.NOBLOCK)
            else:
                sock.send_multipart(frames, flags=zmq.NOBLOCK, copy=False)
        except zmq.Again:
            pass  # not queued (no bound is set: not expected): the request times out and is resent

    def _retry_or_fail(self, shard: int) -> None:
        """A request to ``shard`` timed out: rebuild its socket and resend, or give up."""
        stuck = [p for p in self._pending.values() if p.shard == shard]
        # a fresh socket drops requests queued for a dead peer, so none is delivered after we gave up
        self._socks[shard].close(linger=0)
        self._socks[shard] = self._connect(shard)
        self._waits_ms[shard] = -1
        attempts = max(p.attempts for p in stuck)
        if attempts > self.config.retries:
            for p in stuck:
                del self._pending[p.msg.request_id]
            raise Unavailable(
                f"shard {shard} at {self.endpoints[shard]} did not answer after {attempts} attempts "
                f"of {stuck[0].timeout_s:g}s each",
                detail={"shard": shard, "endpoint": self.endpoints[shard]},
            )
        now = time.monotonic()
        for p in stuck:
            p.msg.flags |= Flag.RETRY
            p.attempts += 1
            p.deadline = now + p.timeout_s
            self._transmit(shard, p.msg)

    def _receive(self, wanted: Sequence[int]) -> None:
        """Receive until every request id in ``wanted`` has a reply in ``self._done``.

        Waits on one shard's socket at a time, in a blocking recv bounded by the request's
        deadline (its other replies queue meanwhile, so the wait lasts as long as the slowest
        shard's): a blocking recv is one poll() in libzmq, where zmq_poll asks every socket
        for its events first, a syscall each, and on a loaded machine every syscall is a
        chance to lose the core."""
        done, pending, socks, waits = self._done, self._pending, self._socks, self._waits_ms
        for rid in wanted:
            while rid not in done:
                p = pending[rid]
                shard = p.shard
                sock = socks[shard]
                remaining = p.deadline - time.monotonic()
                # 0: only what already arrived (a late reply still counts before the resend); a
                # longer wait than a C int of ms holds is cut, then the loop waits again
                wait_ms = min(int(remaining * 1000) + 1, _MAX_WAIT_MS) if remaining > 0 else 0
                set_ms = waits[shard]
                # a wait set earlier that ends at most 1/8 before the deadline is kept (a setsockopt
                # saved per request): a shorter wait only loops once more, never overshoots
                if not 0 <= set_ms <= wait_ms or set_ms * 8 < wait_ms * 7:
                    sock.setsockopt(zmq.RCVTIMEO, wait_ms)
                    waits[shard] = wait_ms
                try:
                    frames = _recv_frames(sock)
                except zmq.Again:
                    if time.monotonic() >= p.deadline:
                        self._retry_or_fail(shard)
                    continue
                self._accept(frames)

    def _accept(self, frames: list[Any]) -> None:
        try:
            msg = protocol.decode(frames)
        except InvalidInput:
            return  # not a reply we can attribute; the request will time out and be retried
        pending = self._pending.pop(msg.request_id, None)
        if pending is None:  # replies to requests already answered (duplicates after a retry) are dropped
            return
        if msg.incarnation != self.incarnations.get(pending.shard):
            self._note_incarnation(pending.shard, msg.incarnation)
        if msg.status and not pending.resigned:  # an error reply: refused as signed before the shard started?
            detail = msg.meta.get("detail")
            if isinstance(detail, dict) and detail.get("resign"):
                pending.resigned = True
                pending.msg.flags |= Flag.RETRY
                pending.deadline = time.monotonic() + pending.timeout_s
                self._pending[msg.request_id] = pending
                self._transmit(pending.shard, pending.msg)
                return
        self._done[msg.request_id] = msg

    def _note_incarnation(self, shard: int, incarnation: int) -> None:
        known = self.incarnations.get(shard)
        if incarnation == known or incarnation == 0:  # 0: a reply too broken to say
            return
        self.incarnations[shard] = incarnation
        if known is not None and self._restarted is None:
            self._restarted = ShardRestarted(
                f"shard {shard} at {self.endpoints[shard]} restarted (incarnation {known:x} -> {incarnation:x}): "
                "its tables came back from its last save; regroup from the last committed pass",
                detail={"shard": shard, "endpoint": self.endpoints[shard], "old": known, "new": incarnation})


def _recv_frames(sock: zmq.Socket) -> list[Any]:
    """One whole message: the header frame copied into bytes (small; a zmq.Frame costs more to
    make and read than the copy), the frames after it uncopied (arrays above the inline size,
    read in place). ``getsockopt(RCVMORE)``: the ``rcvmore`` property costs a microsecond more."""
    frames: list[Any] = [sock.recv()]
    if sock.getsockopt(zmq.RCVMORE):
        frame = sock.recv(copy=False)
        frames.append(frame)
        while frame.more:
            frame = sock.recv(copy=False)
            frames.append(frame)
    return frames
