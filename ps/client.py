"""The sharded parameter-server client used by trainers and by the service.

``pull``/``push`` deduplicate keys, route them with :func:`ps.routing.plan_keys`, send
one request per shard at once (every shard works in parallel) and return a :class:`Ticket`;
``wait(ticket)`` gathers the replies and returns rows in input order. Several tickets may be
in flight. A client is not thread-safe: use one per thread.

Each shard gets a DEALER socket with a stable identity. When a shard does not answer within
``timeout_s`` the socket is rebuilt (reconnecting when the shard is back) and every pending
request to it is resent with the RETRY flag, so the shard applies a push at most once; after
``retries`` resends :class:`Unavailable` names the shard and its endpoint.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import zmq

from core.errors import InvalidInput, NotFound, Unavailable, error_from_code
from ps import protocol
from ps.auth import sign
from ps.protocol import Flag, Message, Op
from ps.ps_config import ClientConfig
from ps.routing import DEFAULT_SLICE_MIN_ELEMENTS, DenseSlice, KeyPlan, place_dense, plan_keys
from tables.table_config import OptimizerConfig


@dataclass
class Ticket:
    """A request in flight: one part per shard asked; ``wait`` completes it."""

    kind: str
    parts: dict[int, int]  # request id -> shard
    plan: KeyPlan | None = None
    replies: dict[int, Message] = field(default_factory=dict)


@dataclass
class _Pending:
    shard: int
    msg: Message
    deadline: float
    timeout_s: float
    attempts: int = 1


class PSClient:
    """Talks to ``endpoints`` (shard ``i`` at ``endpoints[i]``)."""

    def __init__(
        self,
        endpoints: Sequence[str],
        *,
        config: ClientConfig | None = None,
        secret: bytes | None = None,
        dense_slice_min_elements: int = DEFAULT_SLICE_MIN_ELEMENTS,
    ) -> None:
        if not endpoints:
            raise InvalidInput("a PS client needs at least one shard endpoint")
        self.endpoints = list(endpoints)
        self.config = config or ClientConfig()
        self._secret = secret
        self._slice_min = dense_slice_min_elements
        self._identity = b"c" + os.urandom(8)
        self._ctx = zmq.Context()
        self._socks = [self._connect(i) for i in range(len(self.endpoints))]
        self._poller = self._make_poller()
        self._ids = itertools.count(1)
        self._pending: dict[int, _Pending] = {}
        self._done: dict[int, Message] = {}
        self._dense: dict[str, tuple[tuple[int, ...], list[DenseSlice]]] = {}

    @property
    def n_shards(self) -> int:
        return len(self.endpoints)

    # ---------------------------------------------------------------- transport
    def _connect(self, shard: int) -> zmq.Socket:
        sock = self._ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.IDENTITY, self._identity)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(self.endpoints[shard])
        return sock

    def _make_poller(self) -> zmq.Poller:
        poller = zmq.Poller()
        for sock in self._socks:
            poller.register(sock, zmq.POLLIN)
        return poller

    def _transmit(self, shard: int, msg: Message) -> None:
        frames = protocol.encode(msg, auth=self._secret is not None)
        if self._secret is not None:
            frames.append(sign(self._secret, frames))
        # no connection to the shard right now: the request times out and is resent
        with contextlib.suppress(zmq.Again):
            self._socks[shard].send_multipart(frames, flags=zmq.NOBLOCK, copy=len(frames) == 1)

    def _request(self, shard: int, op: Op, table: str = "", arrays: Sequence[np.ndarray] = (),
                 meta: dict[str, Any] | None = None, flags: Flag = Flag.NONE, timeout_s: float | None = None) -> int:
        msg = Message(op, next(self._ids), table, list(arrays), meta or {}, flags)
        timeout = timeout_s or self.config.timeout_s
        self._pending[msg.request_id] = _Pending(shard, msg, time.monotonic() + timeout, timeout)
        self._transmit(shard, msg)
        return msg.request_id

    def _retry_or_fail(self, shard: int) -> None:
        """A request to ``shard`` timed out: rebuild its socket and resend, or give up."""
        stuck = [p for p in self._pending.values() if p.shard == shard]
        # a fresh socket drops requests queued for a dead peer, so none is delivered after we gave up
        self._socks[shard].close(linger=0)
        self._socks[shard] = self._connect(shard)
        self._poller = self._make_poller()
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

    def _receive(self, wanted: set[int]) -> None:
        """Receive until every request id in ``wanted`` has a reply in ``self._done``."""
        while not wanted.issubset(self._done):
            now = time.monotonic()
            waiting = [self._pending[rid] for rid in wanted - self._done.keys()]
            late = [p.shard for p in waiting if p.deadline <= now]
            if late:
                self._retry_or_fail(late[0])
                continue
            timeout_ms = max(1, int((min(p.deadline for p in waiting) - now) * 1000) + 1)
            for sock, _ in self._poller.poll(timeout_ms):
                # one message per readiness: cheaper than draining until zmq.Again is raised
                self._accept(sock.recv_multipart(copy=False))

    def _accept(self, frames: list[Any]) -> None:
        try:
            msg = protocol.decode(frames)
        except InvalidInput:
            return  # not a reply we can attribute; the request will time out and be retried
        pending = self._pending.pop(msg.request_id, None)
        if pending is not None:  # replies to requests already answered (duplicates after a retry) are dropped
            self._done[msg.request_id] = msg

    def _collect(self, rids: Sequence[int]) -> list[Message]:
        """Replies for ``rids`` in order; raises the first error reply as its error class."""
        try:
            self._receive(set(rids))
        except Unavailable:
            for rid in rids:  # abandon the whole request: late replies to its other parts are dropped
                self._pending.pop(rid, None)
                self._done.pop(rid, None)
            raise
        replies = [self._done.pop(rid) for rid in rids]
        for rid, reply in zip(rids, replies, strict=True):
            if reply.status != protocol.STATUS_OK:
                err = error_from_code(reply.meta.get("code", "internal_error"), reply.meta.get("message", "?"),
                                      reply.meta.get("detail"))
                err.detail.setdefault("request_id", rid)
                raise err
        return replies

    def _all(self, op: Op, meta: dict[str, Any] | None = None, *, timeout_s: float | None = None) -> list[dict]:
        rids = [self._request(s, op, meta=meta, timeout_s=timeout_s) for s in range(self.n_shards)]
        return [r.meta for r in self._collect(rids)]

    # ---------------------------------------------------------------- sparse
    def pull(self, table: str, keys: np.ndarray, *, existing_only: bool = False) -> Ticket:
        """Start pulling rows of ``keys`` (uint64); ``wait`` returns float32 (n, width).

        With ``existing_only`` (serving read-through) shards return stored rows only and
        ``wait`` returns ``(rows, found)``: absent ids read as zeros, never invented."""
        plan = plan_keys(self._check_keys(keys), self.n_shards)
        flags = Flag.EXISTING if existing_only else Flag.NONE
        parts = {}
        for s in range(self.n_shards):
            sl = plan.shard_slice(s)
            if sl.stop > sl.start or (s == 0 and plan.keys.shape[0] == 0):
                parts[self._request(s, Op.PULL_SPARSE, table, [plan.keys[sl]], flags=flags)] = s
        return Ticket("pull_existing" if existing_only else "pull", parts, plan)

    def push(self, table: str, keys: np.ndarray, grads: np.ndarray, *, shows: np.ndarray | None = None,
             clicks: np.ndarray | None = None, flags: Flag = Flag.NONE) -> Ticket:
        """Start pushing gradients (float32 (n, width)); duplicate keys are summed here first."""
        keys = self._check_keys(keys)
        grads = np.asarray(grads)
        if grads.dtype != np.float32 or grads.ndim != 2 or grads.shape[0] != keys.shape[0]:
            raise InvalidInput(f"grads must be float32 ({keys.shape[0]}, width), got {grads.dtype} {grads.shape}")
        if (shows is None) != (clicks is None):
            raise InvalidInput("pass both shows and clicks, or neither")
        plan = plan_keys(keys, self.n_shards)
        columns = [plan.sum_by_key(grads)]
        if shows is not None:
            columns += [plan.sum_by_key(np.asarray(shows, np.float32)), plan.sum_by_key(np.asarray(clicks, np.float32))]
        parts = {}
        for s in range(self.n_shards):
            sl = plan.shard_slice(s)
            if sl.stop > sl.start:
                arrays = [plan.keys[sl], *(c[sl] for c in columns)]
                parts[self._request(s, Op.PUSH_SPARSE, table, arrays, flags=flags)] = s
        return Ticket("push", parts, plan)

    def wait(self, ticket: Ticket) -> Any:
        """Complete ``ticket``: rows in input order for a pull (``(rows, found)`` for an
        existing-only pull), None for a push."""
        rids = list(ticket.parts)
        replies = self._collect(rids)
        if ticket.kind not in ("pull", "pull_existing"):
            return None
        plan = ticket.plan
        assert plan is not None
        width = replies[0].arrays[0].shape[1] if replies else 0
        rows = np.empty((plan.keys.shape[0], width), np.float32)
        found = np.empty(plan.keys.shape[0], np.bool_)
        for rid, reply in zip(rids, replies, strict=True):
            sl = plan.shard_slice(ticket.parts[rid])
            rows[sl] = reply.arrays[0]
            if ticket.kind == "pull_existing":
                found[sl] = reply.arrays[1].view(np.bool_)
        if ticket.kind == "pull_existing":
            return rows[plan.inverse], found[plan.inverse]
        return rows[plan.inverse]

    def pull_sparse(self, table: str, keys: np.ndarray) -> np.ndarray:
        return self.wait(self.pull(table, keys))  # type: ignore[return-value]

    def push_sparse(self, table: str, keys: np.ndarray, grads: np.ndarray, **kwargs: Any) -> None:
        self.wait(self.push(table, keys, grads, **kwargs))

    @staticmethod
    def _check_keys(keys: np.ndarray) -> np.ndarray:
        keys = np.asarray(keys)
        if keys.dtype != np.uint64 or keys.ndim != 1:
            raise InvalidInput(f"keys must be a 1-d uint64 array, got {keys.ndim}-d {keys.dtype}")
        return keys

    # ---------------------------------------------------------------- dense
    def init_dense(self, name: str, initial: np.ndarray, *,
                   optimizer: OptimizerConfig | None = None) -> OptimizerConfig | None:
        """Create dense array ``name`` on its shards (the first writer wins; a shape clash is an
        error). Returns the optimizer the array runs (an existing array keeps its own; None
        from shards that do not say)."""
        initial = np.ascontiguousarray(initial, dtype=np.float32)
        slices = place_dense(name, initial.size, self.n_shards, slice_min_elements=self._slice_min)
        meta = {"optimizer": (optimizer or OptimizerConfig(kind="adam", lr=1e-3)).model_dump()}
        flat = initial.reshape(-1)
        rids = [self._request(sl.shard, Op.INIT_DENSE, sl.part, [flat[sl.start : sl.stop]], meta) for sl in slices]
        replies = self._collect(rids)
        self._dense[name] = (initial.shape, slices)
        held = replies[0].meta.get("optimizer")
        return None if held is None else OptimizerConfig.model_validate(held)

    def _dense_layout(self, name: str) -> tuple[tuple[int, ...], list[DenseSlice]]:
        if name not in self._dense:
            raise NotFound(f"dense array {name!r} is unknown to this client; call init_dense first")
        return self._dense[name]

    def pull_dense(self, name: str) -> np.ndarray:
        shape, slices = self._dense_layout(name)
        rids = [self._request(sl.shard, Op.PULL_DENSE, sl.part) for sl in slices]
        return np.concatenate([r.arrays[0] for r in self._collect(rids)]).reshape(shape)

    def push_dense(self, name: str, grad: np.ndarray, *, flags: Flag = Flag.NONE) -> None:
        self.wait(self.start_push_dense(name, grad, flags=flags))

    def start_push_dense(self, name: str, grad: np.ndarray, *, flags: Flag = Flag.NONE) -> Ticket:
        """Start pushing a gradient of dense array ``name``; ``wait`` completes it. ``grad`` is
        sent without a copy: leave it unchanged until then."""
        shape, slices = self._dense_layout(name)
        grad = np.ascontiguousarray(grad, dtype=np.float32)
        if grad.shape != shape:
            raise InvalidInput(f"dense {name!r}: grad shape {grad.shape} != {shape}")
        flat = grad.reshape(-1)
        parts = {self._request(sl.shard, Op.PUSH_DENSE, sl.part, [flat[sl.start : sl.stop]], flags=flags): sl.shard
                 for sl in slices}
        return Ticket("push", parts)

    # ---------------------------------------------------------------- control
    def barrier(self, step: int, workers: int, *, timeout_s: float | None = None) -> None:
        """Wait until ``workers`` workers reached ``step`` on every shard; sync pushes are then applied."""
        self._all(Op.BARRIER, {"step": step, "workers": workers}, timeout_s=timeout_s)

    def save(self, path: str | None = None, *, into: str | None = None, mode: str = "base",
             cursor: str = "checkpoint", timeout_s: float = 600.0, detach: bool = False) -> list[dict]:
        """Every shard saves its tables; returns each shard's entry (save id, mode, cursor, dir,
        manifest: the file entry of its ``shard.json``).

        ``into``: a directory template with ``{shard}`` (one save dir per shard, e.g. one pass);
        else numbered saves under ``path``/shard-NNN or the shard's ``--checkpoint-dir``. A
        delta asked of a shard that has no base on ``cursor`` yet comes back as a base.

        ``detach``: return as soon as every shard took the save's consistent point (pushes
        after this return are not in the save), while the shards write on; the entries then
        lack ``manifest`` and :meth:`save_wait` collects the full ones (or the error). A shard
        runs one save at a time: a save asked during a running one is refused with Conflict.
        """
        metas = []
        for s in range(self.n_shards):
            meta: dict[str, Any] = {"mode": mode, "cursor": cursor}
            if into is not None:
                meta["dir"] = into.format(shard=s)
            elif path is not None:
                meta["path"] = str(path)
            metas.append(meta)
        flags = Flag.DETACH if detach else Flag.NONE
        rids = [self._request(s, Op.SAVE, meta=metas[s], flags=flags, timeout_s=timeout_s)
                for s in range(self.n_shards)]
        return [r.meta for r in self._collect(rids)]

    def save_wait(self, saves: list[dict] | None = None, *, timeout_s: float = 600.0) -> list[dict]:
        """The full entries of the detached saves ``saves`` (what ``save(detach=True)``
        returned) once every shard has written its part; a shard's failure is raised here as
        its error class, naming the shard and the cause. Any client may wait (not only the one
        that asked). Without ``saves``: wait until no shard runs a save (whoever started it)."""
        metas = [{} for _ in range(self.n_shards)] if saves is None else [{"save": e["save"]} for e in saves]
        if len(metas) != self.n_shards:
            raise InvalidInput(f"save_wait needs one entry per shard ({self.n_shards}), got {len(metas)}")
        rids = [self._request(s, Op.SAVE_WAIT, meta=metas[s], timeout_s=timeout_s) for s in range(self.n_shards)]
        return [r.meta for r in self._collect(rids)]

    def load(self, path: str | None = None, *, chain: list[str] | None = None, timeout_s: float = 600.0) -> None:
        """Every shard restores: from ``chain`` (save-dir templates with ``{shard}``, oldest
        first; the newest base onwards is replayed), else its numbered saves under ``path`` or
        its ``--checkpoint-dir``."""
        metas = []
        for s in range(self.n_shards):
            if chain is not None:
                metas.append({"dirs": [t.format(shard=s) for t in chain]})
            else:
                metas.append({"path": str(path)} if path is not None else {})
        rids = [self._request(s, Op.LOAD, meta=metas[s], timeout_s=timeout_s) for s in range(self.n_shards)]
        self._collect(rids)

    def shrink(self) -> list[dict]:
        return self._all(Op.SHRINK)

    def policy(self, table: str, *, admission: dict | None = None, eviction: dict | None = None,
               dry_run: bool = False) -> list[dict]:
        """Per shard: a table's policy and how many rows its eviction would remove now. With
        ``admission``/``eviction`` the new settings are validated, counted and (unless
        ``dry_run``) applied on every shard."""
        meta = {"table": table, "admission": admission, "eviction": eviction, "dry_run": dry_run}
        return self._all(Op.POLICY, {k: v for k, v in meta.items() if v is not None})

    # ---------------------------------------------------------------- rank leases (shard 0)
    def lease(self, action: str, *, holder: str = "", workers: int = 0, ttl_s: float = 0.0, rank: int = -1,
              step: str = "", epoch: str = "", timeout_s: float | None = None) -> dict[str, Any]:
        """One worker-rank lease action on shard 0 (see :mod:`ps.rank_leases`): ``claim``
        -> ``{rank (None: all leased), retry_s, epoch}``; ``renew`` (raises Conflict when another
        holder has the rank); ``release``; ``meet`` -> ``{complete, epoch}``; ``bump``; ``list``."""
        meta = {"action": action, "holder": holder, "workers": workers, "ttl_s": ttl_s, "rank": rank, "step": step,
                "epoch": epoch}
        (reply,) = self._collect([self._request(0, Op.LEASE, meta=meta, timeout_s=timeout_s)])
        return reply.meta

    def end_pass(self) -> list[dict]:
        return self._all(Op.END_PASS)

    def stats(self) -> list[dict]:
        return self._all(Op.STATS)

    def health(self) -> list[dict]:
        return self._all(Op.HEALTH)

    def stop(self) -> None:
        """Ask every shard to exit."""
        self._all(Op.STOP)

    def close(self) -> None:
        for sock in self._socks:
            sock.close(linger=0)
        self._ctx.term()

    def __enter__(self) -> PSClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

