"""One parameter-server shard: sparse and dense tables behind a ZeroMQ ROUTER socket.

One thread runs the request loop, so each request is applied whole before the next one
starts (no torn rows; the tables' own locks also make each pull/push atomic). Each request
goes to the handler its op names in one table; the handlers live with their concept:
data-plane ops in :mod:`ps.shard_tables`, saves and loads in :mod:`ps.shard_save_runs`
(written by a background thread that wakes the loop when done), the policy op in
:mod:`ps.shard_policy`, sync steps in :mod:`ps.sync_steps`, rank leases in
:mod:`ps.rank_leases`. A resent mutating request is answered from :mod:`ps.replay_cache`.
Barriers never block the loop: a barrier is polled and answered at once (:mod:`ps.sync_steps`);
a handler that returns None has deferred its reply (a save being written).

Hostile input: a frame larger than the largest legitimate one (:meth:`PSConfig.max_frame_bytes`)
is dropped by libzmq as it arrives (ZMQ_MAXMSGSIZE), never buffered, and its peer
disconnected; libzmq does not say why it closes a connection, so the shard counts every
closed connection (``connections_closed`` in its stats). Everything else is authenticated
(:mod:`ps.auth`) before it is decoded; every refusal is counted by error code, and the log
shows the first few of each minute, then one summary line (:class:`ps.shard_requests.RefusalLog`).
A reply its peer cannot take now (gone, or sending without reading) is dropped and counted
(``replies_dropped``), never waited for. Every reply carries the shard's ``incarnation``,
random at each process start, so clients notice a restart (:mod:`ps.transport`).
"""

from __future__ import annotations

import gc
import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import zmq
from zmq.utils.monitor import recv_monitor_message

from core.errors import Forbidden, InvalidInput, StreamrecError
from ps import protocol
from ps.auth import Verifier, require_auth_for
from ps.protocol import Flag, Message, Op
from ps.ps_config import PSConfig
from ps.rank_leases import RankLeases
from ps.replay_cache import MUTATING, ReplayCache
from ps.shard_changes import changes_reply
from ps.shard_id_rows import ShardIdRows
from ps.shard_policy import POLICY_FILE, RuntimePolicies, policy_reply
from ps.shard_requests import REPLACED_CONNECTION, REPLIES_QUEUED_PER_PEER, Outbox, RefusalLog, ok
from ps.shard_save_runs import ShardSaveRuns
from ps.shard_saves import managed_saves, shard_dir
from ps.shard_tables import ShardTables
from ps.shard_warmup import warm_kernels
from tables.dense_table import DenseTable
from tables.sparse_table import SparseTable

log = logging.getLogger(__name__)

Handler = Callable[[bytes, Message], "Message | None"]  # (client identity, request) -> reply, or None: deferred
_OP_NAMES = {op: op.name.lower() for op in Op}  # the requests counter's keys (Enum.name is a slow property)
_AUTH_BIT = int(Flag.AUTH)  # IntFlag's & runs as Python code
_HEADER_SIZE, _FLAGS_AT = protocol.HEADER.size, 6  # the flags field (u16 LE) after magic, version, op
_N_ARRAYS_AT, _NAME_LEN_AT = 9, 10  # HEADER's n_arrays (u8) and name_len (u16 LE)
_INLINE_BIT = 0x80  # a descriptor's dtype code: this array's bytes are in the header frame
_STOP, _PULL = Op.STOP, Op.PULL_SPARSE
_IDLE_MS = 1000  # an idle loop wakes this often to count closed connections


def _recv_body(sock: zmq.Socket) -> list[Any]:
    """The frames of a request whose identity frame was just read: the header copied into bytes
    (small: cheaper than a zmq.Frame), the frames after it uncopied (a push's gradients are read
    in place), except a small signed request's auth tag, the one frame after a header whose
    arrays all travel inline: copied too (40 bytes)."""
    head = sock.recv()
    body: list[Any] = [head]
    if sock.getsockopt(zmq.RCVMORE):
        if _only_tag_follows(head):
            body.append(sock.recv())
            if not sock.getsockopt(zmq.RCVMORE):
                return body
        frame = sock.recv(copy=False)  # array frames (or, in a malformed message, whatever came)
        body.append(frame)
        while frame.more:
            frame = sock.recv(copy=False)
            body.append(frame)
    return body


def _only_tag_follows(head: bytes) -> bool:
    """Whether ``head`` is a signed header with no array frames after it (none, or one inline
    array): read in place, a guess that only picks how the next frame is received."""
    if len(head) <= _HEADER_SIZE + 1 or not head[_FLAGS_AT] & _AUTH_BIT:
        return False
    n_arrays = head[_N_ARRAYS_AT]
    if n_arrays == 0:
        return True
    desc_at = _HEADER_SIZE + (head[_NAME_LEN_AT] | head[_NAME_LEN_AT + 1] << 8)
    return n_arrays == 1 and desc_at < len(head) and bool(head[desc_at] & _INLINE_BIT)


class ShardServer:
    """Serves ``config.tables`` (plus dense parts created by ``init_dense``) on ``endpoint``."""

    def __init__(
        self,
        config: PSConfig,
        *,
        index: int,
        endpoint: str,
        checkpoint_dir: str | Path | None = None,
        secret: bytes | None = None,
    ) -> None:
        require_auth_for(endpoint, secret)
        self.index = index
        self.endpoint = endpoint
        self.incarnation = int.from_bytes(os.urandom(8), "little") or 1  # 0 means "not said"
        self.max_frame_bytes = config.max_frame_bytes()
        self.tables = ShardTables(config.tables, index=index, max_bytes=config.shard.max_bytes,
                                  sketch_share=config.shard.max_sketch_share,
                                  staleness_sample=config.shard.staleness_sample, id_rows_tier=config.id_rows_tier)
        self._configs = config.tables
        self.id_rows = ShardIdRows(self.tables)
        # made before the restore: requests signed before this process started are refused
        self._verifier = None if secret is None else Verifier(
            secret, max_skew_s=config.auth.max_skew_s, capacity=config.auth.replay_capacity)
        checkpoint_root = Path(checkpoint_dir) if checkpoint_dir else None
        self.saves = ShardSaveRuns(self.tables, checkpoint_root=checkpoint_root, count_error=self._count_error)
        self.rank_leases = RankLeases()  # used on shard 0 only (trainers without a fixed rank)
        self._replay = ReplayCache()
        self._outbox: Outbox | None = None  # the loop's, while it serves
        self._monitor: zmq.Socket | None = None  # the loop's: closed connections, read in the loop only
        self.requests: Counter[str] = Counter()
        self._refusals = RefusalLog(log, f"shard {index}")
        self.errors: Counter[str] = self._refusals.counts  # refusals by error code
        self.connections_closed = 0
        self._handlers: dict[Op, Handler] = {  # PULL_SPARSE is answered before it (_handle)
            Op.PUSH_SPARSE: lambda ident, msg: self.tables.push(msg),
            Op.INIT_DENSE: lambda ident, msg: self.tables.init_dense(msg),
            Op.PULL_DENSE: lambda ident, msg: self.tables.pull_dense(msg),
            Op.PUSH_DENSE: lambda ident, msg: self.tables.push_dense(msg),
            Op.ID_ROWS_WRITE: lambda ident, msg: self.id_rows.write(msg),
            Op.ID_ROWS_READ: lambda ident, msg: self.id_rows.read(msg),
            Op.RATES: lambda ident, msg: self.id_rows.rates(msg),
            Op.BARRIER: self._barrier,
            Op.SAVE: self.saves.start,
            Op.SAVE_WAIT: lambda ident, msg: self.saves.wait(self._loop_outbox(), ident, msg),
            Op.LOAD: lambda ident, msg: self._load(msg),
            Op.SHRINK: lambda ident, msg: self.tables.shrink(msg),
            Op.POLICY: self._policy,
            Op.END_PASS: lambda ident, msg: self.tables.end_pass(msg),
            Op.CHANGES: lambda ident, msg: changes_reply(self.tables.table(msg.table), msg),
            Op.LEASE: lambda ident, msg: ok(msg, meta=self.rank_leases.handle(msg.meta)),
            Op.STATS: lambda ident, msg: ok(msg, meta=self._fresh_stats()),
            Op.HEALTH: lambda ident, msg: ok(msg, meta={"ok": True, "index": self.index, "pid": os.getpid(),
                                                        "incarnation": self.incarnation}),
            Op.STOP: lambda ident, msg: ok(msg, meta={"stopping": True}),
        }
        if checkpoint_root is not None:
            saves = managed_saves(shard_dir(checkpoint_root, index))
            if saves:
                self.saves.restore(saves)
        # after the restore, which made the id-rows tables its saves hold
        self.runtime_policies = RuntimePolicies(
            self.sparse, None if checkpoint_root is None else shard_dir(checkpoint_root, index) / POLICY_FILE)
        self.runtime_policies.reapply(self.sparse)

    @property
    def sparse(self) -> dict[str, SparseTable]:
        return self.tables.sparse

    @property
    def dense(self) -> dict[str, DenseTable]:
        return self.tables.dense

    # ---------------------------------------------------------------- loop
    def serve_forever(self) -> None:
        """Serve until a STOP request arrives."""
        warm_kernels(self._configs)  # before the bind: a shard that answers is warm
        ctx = zmq.Context()
        sock = ctx.socket(zmq.ROUTER)
        sock.setsockopt(zmq.ROUTER_HANDOVER, 1)  # a client reconnecting with its identity takes over
        sock.setsockopt(zmq.LINGER, 1000)
        sock.setsockopt(zmq.MAXMSGSIZE, self.max_frame_bytes)  # a bigger frame: peer disconnected, not buffered
        sock.setsockopt(zmq.SNDHWM, REPLIES_QUEUED_PER_PEER)
        sock.bind(self.endpoint)
        monitor = sock.get_monitor_socket(zmq.EVENT_DISCONNECTED)
        # the save thread wakes the loop through an inproc pair: ZeroMQ sockets belong to one thread
        done_rx = ctx.socket(zmq.PAIR)
        done_rx.bind(f"inproc://save-done-{id(self)}")
        done_tx = ctx.socket(zmq.PAIR)
        done_tx.connect(f"inproc://save-done-{id(self)}")
        done_lock = threading.Lock()

        def notify_written() -> None:
            with done_lock:
                done_tx.send(b"")

        self.saves.notify_written = notify_written
        outbox = self._outbox = Outbox(sock, self.incarnation)
        # while a save is written: zmq_poll on a fixed list (zmq.Poller rebuilds a list per call),
        # which answers in this order, so a written save is seen before the next request
        poll_items = [(done_rx, zmq.POLLIN), (monitor, zmq.POLLIN), (sock, zmq.POLLIN)]
        # otherwise a blocking recv: one poll() in libzmq where zmq_poll first asks each socket
        # for its events, a syscall each (on a loaded machine each one is a chance to lose the
        # core); closed connections are counted when idle, every second and before STATS
        sock.setsockopt(zmq.RCVTIMEO, _IDLE_MS)
        self._monitor = monitor
        log.info("shard %d serving %s on %s", self.index, sorted(self.sparse), self.endpoint)
        # What is alive now (numba's and llvmlite's object graphs, ~130k objects) lives as long as
        # the process: frozen, a full collection no longer walks it (~40 ms that stalled a request)
        gc.collect()
        gc.freeze()
        saves, handle, clock = self.saves, self._handle, time.monotonic
        try:
            running = True
            count_closed_at = clock() + 1.0
            while running:
                if saves.saving:
                    for ready, _ in zmq.zmq_poll(poll_items):
                        if ready is sock:
                            running = handle(outbox, sock.recv(), _recv_body(sock))
                        elif ready is done_rx:
                            done_rx.recv()
                            saves.written(outbox)
                        else:
                            self._count_closed()
                    continue
                try:
                    ident = sock.recv()
                except zmq.Again:  # idle
                    self._count_closed()
                    continue
                running = handle(outbox, ident, _recv_body(sock))
                if clock() >= count_closed_at:
                    count_closed_at = clock() + 1.0
                    self._count_closed()
        finally:
            self.saves.join()
            sock.disable_monitor()
            for s in (monitor, sock, done_rx, done_tx):
                s.close(linger=1000)
            ctx.term()

    def _handle(self, outbox: Outbox, ident: bytes, body: list[Any]) -> bool:
        """Answer one request from client ``ident``; False once it was STOP."""
        try:
            if self._verifier is not None:
                head = body[0]  # bytes (_recv_body): the flags' low byte read in place, as protocol.peek would
                has_tag = len(head) >= _HEADER_SIZE and bool(head[_FLAGS_AT] & _AUTH_BIT)
                try:
                    self._verifier.verify(body, has_tag=has_tag, identity=ident)
                except Forbidden as err:
                    if ident[:1] != b"\0":
                        raise
                    # Our clients always set a routing id, so a "\0" name is the old connection of one that
                    # reconnected under its id (ROUTER_HANDOVER renamed it): what was still queued there is
                    # signed for the old name, and the client resends it on its new connection.
                    raise Forbidden(f"{err.message} (a request queued on a connection its client has replaced; "
                                    "the client resends it)", detail={REPLACED_CONNECTION: True}) from None
            msg = protocol.decode(body)
            op = msg.op
            self.requests[_OP_NAMES[op]] += 1
            if op is _PULL:  # the hot read: no replay cache, no handler lookup; rows gathered into the frame
                frame = self.tables.pull_frame(msg, outbox.incarnation)
                if frame is not None:
                    outbox.send_frame(ident, frame)
                else:
                    outbox.reply(ident, self.tables.pull(msg))  # refusals, existing-only, big replies
                return True
            mutating = op in MUTATING  # reads skip the replay cache
            if mutating:
                if ident[:1] == b"\0":
                    # libzmq names a connection without a routing id "\0" + 4 bytes, and so renames
                    # the old connection of a client that reconnected under its id (ROUTER_HANDOVER):
                    # requests still queued on it come under the new name, where the replay cache
                    # cannot tell them from their resends (a push applied twice). The transport
                    # resends every pending request on its new connection: refused, nothing is lost.
                    raise InvalidInput("a request that changes tables needs the client's routing id "
                                       "(ZMQ_ROUTING_ID) so that a resend is applied once")
                if self._replay.applied(ident, msg):
                    # a resent rates request still needs its answer: read, not counted twice
                    outbox.reply(ident, self.id_rows.rates(msg, observe=False) if op is Op.RATES else
                                 Message(op, msg.request_id, msg.table, meta={"replayed": True}))
                    return True
            handler = self._handlers.get(op)
            if handler is None:
                raise InvalidInput(f"unknown op {int(op)}")
            reply = handler(ident, msg)
            if mutating:
                self._replay.remember(ident, msg)
            if reply is not None:
                outbox.reply(ident, reply)
            return op is not _STOP
        except StreamrecError as err:
            self._count_error(err)
            op, _, rid = protocol.peek(body)
            outbox.error(ident, op, rid, err)
        except Exception as exc:  # a bug must not take the shard down; it is logged and counted
            op, _, rid = protocol.peek(body)
            log.exception("shard %d: internal error on op %d", self.index, op)
            err = StreamrecError(f"internal error in shard {self.index}: {type(exc).__name__}: {exc}")
            self._count_error(err)
            outbox.error(ident, op, rid, err)
        return True

    def _count_closed(self) -> None:
        """Count the connections closed since the last count (the monitor's queued events)."""
        monitor = self._monitor
        while monitor is not None and monitor.getsockopt(zmq.EVENTS) & zmq.POLLIN:
            recv_monitor_message(monitor)
            self.connections_closed += 1

    @property
    def replies_dropped(self) -> dict[str, int]:
        """Replies dropped by reason (:class:`ps.shard_requests.Outbox`): a copy, safe from any thread."""
        return dict(self._outbox.dropped) if self._outbox is not None else {}

    def _fresh_stats(self) -> dict[str, Any]:
        self._count_closed()
        return self.stats()

    def _loop_outbox(self) -> Outbox:
        assert self._outbox is not None, "handlers run inside serve_forever"
        return self._outbox

    def _count_error(self, err: StreamrecError) -> None:
        self._refusals.refused(err)

    # ---------------------------------------------------------------- sync steps
    def _barrier(self, ident: bytes, msg: Message) -> Message:
        """Poll a step's barrier (:mod:`ps.sync_steps`); the poll that completes it applies the held pushes."""
        try:
            step, workers, worker = int(msg.meta["step"]), int(msg.meta["workers"]), str(msg.meta["worker"])
        except (KeyError, TypeError, ValueError):
            raise InvalidInput("barrier needs integer meta 'step' and 'workers' and a 'worker' id") from None
        sync = self.tables.sync
        poll = sync.arrive(step, workers, worker, time.monotonic())
        if poll.release:
            held = sync.release()
            failures = self.tables.apply_held(held)
            for err in failures[1:]:  # the first is counted as this poll's error
                self._count_error(err)
            sync.released(failures[0] if failures else None, held.pushes)  # every worker hears the same outcome
            if failures:
                raise failures[0]
            return Message(Op.BARRIER, msg.request_id, meta={"step": step, "applied": held.pushes})
        if poll.error is not None:
            raise poll.error
        return Message(Op.BARRIER, msg.request_id, meta=poll.meta)

    def _policy(self, ident: bytes, msg: Message) -> Message:
        table = self.tables.table(str(msg.meta.get("table", "")))
        return ok(msg, meta=policy_reply(table, msg.meta, self.runtime_policies))

    def _load(self, msg: Message) -> Message:
        """LOAD: a restore adopts each save's policy, which may predate a runtime change."""
        try:
            return self.saves.load(msg)
        finally:
            self.runtime_policies.reapply(self.sparse)

    def stats(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "pid": os.getpid(),
            "incarnation": self.incarnation,
            "restored_from": self.saves.restored_from,
            "requests": dict(self.requests),
            "errors": dict(self.errors),
            "connections_closed": self.connections_closed,
            "replies_dropped": self.replies_dropped,
            "max_frame_bytes": self.max_frame_bytes,
            "tables": {n: t.stats() for n, t in self.sparse.items()},
            "dense": {n: m["size"] for n, m in self.tables.dense_meta.items()},
            **({} if self.tables.staleness is None else {"staleness": self.tables.staleness.state()}),
        }
