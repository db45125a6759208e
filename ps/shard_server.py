"""One parameter-server shard: sparse and dense tables behind a ZeroMQ ROUTER socket.

One thread runs the request loop, so each request is applied whole before the next one
starts (no torn rows; the tables' own locks also make each pull/push atomic). Barriers never
block the loop: a barrier reply is deferred until the last worker of the step arrives
(see :mod:`ps.sync_steps`).
A save is two steps. The request loop takes its consistent point for every table at once
(a base starts a copy-on-write snapshot, a delta copies its changed rows; dense parts are
copied), so no request lands between the tables' points; a background thread then writes
(the tables are thread-safe, so pushes keep flowing) and reports back through an inproc
socket, because ZeroMQ sockets belong to one thread. A plain SAVE is answered when the
files are written; a DETACH save right after the consistent point, and SAVE_WAIT collects
its entry or error later. One save runs at a time: a SAVE during a running one is refused
(Conflict naming the running save); SAVE_WAIT is how to wait for it.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import zmq

from core.errors import ConfigError, Conflict, InvalidInput, NotFound, StreamrecError
from ps import protocol
from ps.auth import Verifier, require_auth_for
from ps.protocol import Flag, Message, Op
from ps.ps_config import PSConfig
from ps.rank_leases import RankLeases
from ps.shard_saves import (
    commit_managed,
    managed_saves,
    next_managed_dir,
    restore_plan,
    shard_dir,
    write_save_manifest,
)
from ps.sync_steps import SyncSteps
from stores.staging import StagedSave, fetched
from tables.dense_table import DenseTable
from tables.sparse_table import SparseTable
from tables.table_config import DenseTableConfig, OptimizerConfig
from tables.table_files import TableSave

log = logging.getLogger(__name__)

_REPLAY_CACHE = 4096  # (client, request id) of recent mutating requests: a retried push applies once
_MAX_FRAME_BYTES = 1 << 30
_MUTATING = (Op.PUSH_SPARSE, Op.PUSH_DENSE, Op.INIT_DENSE, Op.SHRINK, Op.END_PASS, Op.LOAD)


@dataclass
class _Save:
    """This shard's running save, or its last one (kept so SAVE_WAIT can collect it)."""

    id: str
    ident: bytes  # who asked for it
    msg: Message  # its SAVE request
    target: StagedSave  # where it is written here, and the client's dir (a path, or a URL it is uploaded to)
    mode: str
    cursor: str
    started: float = field(default_factory=time.monotonic)
    waiters: list[tuple[bytes, int]] = field(default_factory=list)  # SAVE_WAIT requests to answer when written
    written: bool = False
    entry: dict[str, Any] = field(default_factory=dict)  # the reply meta once written
    error: StreamrecError | None = None

    @property
    def detached(self) -> bool:
        return bool(self.msg.flags & Flag.DETACH)

    def reply(self, op: Op, rid: int) -> list[Any]:
        """Frames answering ``op``/``rid`` with this (written) save's outcome."""
        if self.error is not None:
            return protocol.error_reply(op, rid, self.error)
        return protocol.encode(Message(op, rid, meta=self.entry))


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
        self.sparse: dict[str, SparseTable] = {t.name: SparseTable(t) for t in config.tables}
        self.dense: dict[str, DenseTable] = {}
        self._dense_meta: dict[str, dict[str, Any]] = {}
        self._verifier = Verifier(secret) if secret is not None else None
        self._checkpoint_root = Path(checkpoint_dir) if checkpoint_dir else None
        self._sync = SyncSteps()
        self.rank_leases = RankLeases()  # used on shard 0 only (trainers without a fixed rank)
        self._replayed: OrderedDict[tuple[bytes, int], None] = OrderedDict()
        self._save_thread: threading.Thread | None = None
        self._save: _Save | None = None  # the running or last save
        self._idle_waiters: list[tuple[bytes, int]] = []  # SAVE_WAIT without a save id: any running save
        self._based: set[str] = set()  # cursors this process wrote a base on (deltas may follow)
        self.requests: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()
        self.restored_from: str | None = None
        if self._checkpoint_root is not None:
            saves = managed_saves(shard_dir(self._checkpoint_root, index))
            if saves:
                self._restore(saves)

    # ---------------------------------------------------------------- loop
    def serve_forever(self) -> None:
        """Serve until a STOP request arrives."""
        ctx = zmq.Context()
        sock = ctx.socket(zmq.ROUTER)
        sock.setsockopt(zmq.ROUTER_HANDOVER, 1)  # a client reconnecting with its identity takes over
        sock.setsockopt(zmq.LINGER, 1000)
        sock.setsockopt(zmq.MAXMSGSIZE, _MAX_FRAME_BYTES)  # a peer sending more is disconnected, not buffered
        sock.bind(self.endpoint)
        done_rx = ctx.socket(zmq.PAIR)
        done_rx.bind(f"inproc://save-done-{id(self)}")
        self._done_tx = ctx.socket(zmq.PAIR)
        self._done_tx.connect(f"inproc://save-done-{id(self)}")
        self._done_lock = threading.Lock()
        poller = zmq.Poller()
        poller.register(sock, zmq.POLLIN)
        poller.register(done_rx, zmq.POLLIN)
        log.info("shard %d serving %s on %s", self.index, sorted(self.sparse), self.endpoint)
        try:
            running = True
            while running:
                ready = dict(poller.poll())
                if done_rx in ready:
                    done_rx.recv()
                    self._save_written(sock)
                if sock in ready:
                    frames = sock.recv_multipart(copy=False)
                    running = self._handle(sock, frames)
        finally:
            if self._save_thread is not None:
                self._save_thread.join()
            for s in (sock, done_rx, self._done_tx):
                s.close(linger=1000)
            ctx.term()

    def _reply(self, sock: zmq.Socket, ident: bytes, msg: Message) -> None:
        frames = protocol.encode(msg)
        # zero-copy pays off only for big frames; small replies are cheaper copied
        sock.send_multipart([ident, *frames], copy=len(frames) == 1)

    def _handle(self, sock: zmq.Socket, frames: list[Any]) -> bool:
        ident, body = frames[0].bytes, frames[1:]
        op, flags, rid = protocol.peek(body)
        try:
            if self._verifier is not None:
                self._verifier.verify(body, has_tag=bool(flags & Flag.AUTH))
            msg = protocol.decode(body)
            self.requests[msg.op.name.lower()] += 1
            # any request id already applied is answered from the cache: a resend may even overtake
            # its original when the client rebuilt its socket (request ids never repeat per client)
            if msg.op in _MUTATING and (ident, msg.request_id) in self._replayed:
                self._reply(sock, ident, Message(msg.op, msg.request_id, msg.table, meta={"replayed": True}))
                return True
            reply = self._dispatch(sock, ident, msg)
            if msg.op in _MUTATING:
                self._remember(ident, msg.request_id)
            if reply is not None:
                self._reply(sock, ident, reply)
            return msg.op != Op.STOP
        except StreamrecError as err:
            self._count_error(err)
            sock.send_multipart([ident, *protocol.error_reply(op, rid, err)])
        except Exception as exc:  # a bug must not take the shard down; it is logged and counted
            log.exception("shard %d: internal error on op %d", self.index, op)
            err = StreamrecError(f"internal error in shard {self.index}: {type(exc).__name__}: {exc}")
            self._count_error(err)
            sock.send_multipart([ident, *protocol.error_reply(op, rid, err)])
        return True

    def _count_error(self, err: StreamrecError) -> None:
        self.errors[err.code] += 1
        log.warning("shard %d refused a request: %s", self.index, err.message)

    def _remember(self, ident: bytes, rid: int) -> None:
        self._replayed[(ident, rid)] = None
        if len(self._replayed) > _REPLAY_CACHE:
            self._replayed.popitem(last=False)

    def _dispatch(self, sock: zmq.Socket, ident: bytes, msg: Message) -> Message | None:
        op = msg.op
        if op == Op.PULL_SPARSE:
            (keys,) = self._arrays(msg, 1)
            if msg.flags & Flag.EXISTING:
                rows, found = self._table(msg.table).pull_existing(self._keys(keys))
                return self._ok(msg, rows, found.view(np.uint8))
            return self._ok(msg, self._table(msg.table).pull(self._keys(keys)))
        if op == Op.PUSH_SPARSE:
            self._push_sparse(msg)
            return self._ok(msg)
        if op == Op.INIT_DENSE:
            return self._ok(msg, meta={"optimizer": self._init_dense(msg)})
        if op == Op.PULL_DENSE:
            return self._ok(msg, self._dense(msg.table).pull())
        if op == Op.PUSH_DENSE:
            self._push_dense(msg)
            return self._ok(msg)
        if op == Op.BARRIER:
            return self._barrier(sock, ident, msg)
        if op == Op.SAVE:
            return self._start_save(ident, msg)
        if op == Op.SAVE_WAIT:
            return self._save_wait(sock, ident, msg)
        if op == Op.LOAD:
            self._load_request(msg)
            return self._ok(msg)
        if op == Op.SHRINK:
            return self._ok(msg, meta={"evicted": {n: int(t.shrink()) for n, t in self.sparse.items()}})
        if op == Op.POLICY:
            return self._ok(msg, meta=self._policy(msg.meta))
        if op == Op.END_PASS:
            return self._ok(msg, meta={"passes": {n: int(t.end_pass()) for n, t in self.sparse.items()}})
        if op == Op.LEASE:
            return self._ok(msg, meta=self.rank_leases.handle(msg.meta))
        if op == Op.STATS:
            return self._ok(msg, meta=self.stats())
        if op == Op.HEALTH:
            return self._ok(msg, meta={"ok": True, "index": self.index, "pid": os.getpid()})
        if op == Op.STOP:
            return self._ok(msg, meta={"stopping": True})
        raise InvalidInput(f"unknown op {int(op)}")

    def _policy(self, meta: dict[str, Any]) -> dict[str, Any]:
        """Read a table's admission/eviction policy, count what an eviction policy would evict
        (dry run), or apply new settings."""
        table = self._table(str(meta.get("table", "")))
        admission, eviction = meta.get("admission"), meta.get("eviction")
        if admission is not None or eviction is not None:
            cfg = self._policy_config(table, admission, eviction)
            if not meta.get("dry_run", False):
                table.set_policy(admission=admission, eviction=eviction)
            would = table.shrink(policy=cfg.eviction, dry_run=True)
        else:
            cfg = table.config
            would = table.shrink(dry_run=True)
        return {"table": table.name, "admission": cfg.admission.model_dump(), "eviction": cfg.eviction.model_dump(),
                "would_evict": int(would), "rows": table.size(), "applied": bool(
                    (admission is not None or eviction is not None) and not meta.get("dry_run", False))}

    @staticmethod
    def _policy_config(table: SparseTable, admission: Any, eviction: Any) -> Any:
        try:
            return table.policy_config(admission=admission, eviction=eviction)
        except ConfigError as err:  # a request, not a config file: 422 like any bad input
            raise InvalidInput(err.message, detail=err.detail) from None

    # ---------------------------------------------------------------- helpers
    @staticmethod
    def _ok(msg: Message, *arrays: np.ndarray, meta: dict[str, Any] | None = None) -> Message:
        return Message(msg.op, msg.request_id, msg.table, arrays=list(arrays), meta=meta or {})

    @staticmethod
    def _arrays(msg: Message, *counts: int) -> list[np.ndarray]:
        if len(msg.arrays) not in counts:
            wanted = " or ".join(map(str, counts))
            raise InvalidInput(f"{msg.op.name.lower()} takes {wanted} arrays, got {len(msg.arrays)}")
        return msg.arrays

    @staticmethod
    def _keys(keys: np.ndarray) -> np.ndarray:
        if keys.dtype != np.uint64 or keys.ndim != 1:
            raise InvalidInput(f"keys must be a 1-d uint64 array, got {keys.ndim}-d {keys.dtype}")
        return keys

    def _table(self, name: str) -> SparseTable:
        table = self.sparse.get(name)
        if table is None:
            raise NotFound(f"shard {self.index} has no sparse table {name!r} (has {sorted(self.sparse)})")
        return table

    def _dense(self, name: str) -> DenseTable:
        table = self.dense.get(name)
        if table is None:
            raise NotFound(f"shard {self.index} has no dense array {name!r}; call init_dense first")
        return table

    def _push_sparse(self, msg: Message) -> None:
        arrays = self._arrays(msg, 2, 4)
        keys, grads = self._keys(arrays[0]), arrays[1]
        shows, clicks = (arrays[2], arrays[3]) if len(arrays) == 4 else (None, None)
        table = self._table(msg.table)
        if grads.dtype != np.float32 or grads.shape != (keys.shape[0], table.width):
            raise InvalidInput(
                f"table {msg.table!r}: grads must be float32 ({keys.shape[0]}, {table.width}), "
                f"got {grads.dtype} {grads.shape}"
            )
        if msg.flags & Flag.GEO_DELTA:
            opt = table.config.optimizer
            if opt.kind != "sgd" or opt.lr != 1.0 or opt.l2 or opt.grad_clip:
                raise InvalidInput(f"table {msg.table!r}: geo deltas need optimizer sgd with lr 1, no l2, no clip")
            grads = -grads  # sgd with lr 1: w -= -delta adds the delta
        if msg.flags & Flag.SYNC:
            self._sync.hold_sparse(msg.table, keys, grads, shows, clicks)
            return
        table.push(keys, grads, shows=shows, clicks=clicks)

    def _init_dense(self, msg: Message) -> dict[str, Any]:
        """Create the dense part unless it exists; returns the optimizer it runs."""
        (initial,) = self._arrays(msg, 1)
        if initial.dtype != np.float32 or initial.ndim != 1:
            raise InvalidInput(
                f"dense {msg.table!r}: initial value must be 1-d float32, got {initial.ndim}-d {initial.dtype}"
            )
        existing = self.dense.get(msg.table)
        if existing is not None:
            size = self._dense_meta[msg.table]["size"]
            if size != initial.shape[0]:
                raise Conflict(f"dense {msg.table!r} exists with {size} elements; init with {initial.shape[0]} refused")
            return self._dense_meta[msg.table]["optimizer"]  # first writer wins
        optimizer = OptimizerConfig.model_validate(msg.meta.get("optimizer", {"kind": "adam", "lr": 1e-3}))
        cfg = DenseTableConfig(name=msg.table, optimizer=optimizer)
        self.dense[msg.table] = DenseTable(cfg, initial=np.array(initial))
        self._dense_meta[msg.table] = {"size": int(initial.shape[0]), "optimizer": optimizer.model_dump()}
        return self._dense_meta[msg.table]["optimizer"]

    def _push_dense(self, msg: Message) -> None:
        (grad,) = self._arrays(msg, 1)
        table = self._dense(msg.table)
        size = self._dense_meta[msg.table]["size"]
        if grad.dtype != np.float32 or grad.shape != (size,):
            raise InvalidInput(f"dense {msg.table!r}: grad must be float32 ({size},), got {grad.dtype} {grad.shape}")
        if msg.flags & Flag.SYNC:
            self._sync.hold_dense(msg.table, grad)
            return
        table.push(grad)

    def _barrier(self, sock: zmq.Socket, ident: bytes, msg: Message) -> Message | None:
        try:
            step, workers = int(msg.meta["step"]), int(msg.meta["workers"])
        except (KeyError, TypeError, ValueError):
            raise InvalidInput("barrier needs integer meta 'step' and 'workers'") from None
        waiters = self._sync.arrive(step, workers, (ident, msg.request_id))
        if waiters is None:
            return None
        held = self._sync.release()
        failures = []
        for name, (keys, grads, shows, clicks) in held.sparse.items():
            try:
                self.sparse[name].push(keys, grads, shows=shows, clicks=clicks)  # duplicates summed: one update
            except StreamrecError as err:
                failures.append(err)
        for name, grad in held.dense.items():
            try:
                self.dense[name].push(grad)
            except StreamrecError as err:
                failures.append(err)
        for err in failures:
            self._count_error(err)
        for who, rid in waiters:  # every worker of the step hears the same outcome
            if failures:
                sock.send_multipart([who, *protocol.error_reply(Op.BARRIER, rid, failures[0])])
            else:
                self._reply(sock, who, Message(Op.BARRIER, rid, meta={"step": step, "applied": held.pushes}))
        return None

    # ---------------------------------------------------------------- checkpoints
    def _managed_dir(self, msg: Message) -> Path:
        root = msg.meta.get("path")
        if root is None and self._checkpoint_root is None:
            raise InvalidInput(f"shard {self.index} has no --checkpoint-dir; pass a directory")
        return shard_dir(root if root is not None else self._checkpoint_root, self.index)  # type: ignore[arg-type]

    @property
    def _saving(self) -> bool:
        return self._save is not None and not self._save.written

    def _start_save(self, ident: bytes, msg: Message) -> Message | None:
        mode, cursor = msg.meta.get("mode", "base"), msg.meta.get("cursor", "checkpoint")
        if mode not in ("base", "delta") or not isinstance(cursor, str):
            raise InvalidInput(f"save mode must be 'base' or 'delta' and cursor a string, got {mode!r}, {cursor!r}")
        if self._saving:
            run = self._save
            assert run is not None
            raise Conflict(f"shard {self.index}: a save is already running ({run.mode} on cursor {run.cursor!r} into "
                           f"{run.target.location}, for {time.monotonic() - run.started:.1f} s); wait for it "
                           "(save_wait)",
                           detail={"shard": self.index, "save": run.id})
        if mode == "delta" and cursor not in self._based:
            mode = "base"  # a delta must follow a base this process wrote on the same cursor
        managed = None if "dir" in msg.meta else self._managed_dir(msg)
        # a client-named dir may be a URL (s3://...): the save is written to a scratch dir here and uploaded
        target = StagedSave(str(msg.meta["dir"]) if managed is None else str(next_managed_dir(managed, mode)),
                            scratch=self._checkpoint_root)
        save_dir = target.local
        # The consistent point of every table at once: no request runs between them.
        points: dict[str, TableSave] = {}
        try:
            for name, table in self.sparse.items():
                points[name] = table.begin_save(save_dir / "sparse" / name, mode=mode, cursor=cursor)
        except BaseException:
            for point in points.values():
                point.abort()
            target.cleanup()
            raise
        dense = {name: (table, table.snapshot()) for name, table in self.dense.items()}
        dense_meta = {k: dict(v) for k, v in self._dense_meta.items()}
        self._based.add(cursor)
        run = _Save(os.urandom(8).hex(), ident, msg, target, mode, cursor)
        self._save = run
        self._save_thread = threading.Thread(target=self._write_save, args=(run, managed, points, dense, dense_meta),
                                             name="save", daemon=True)
        self._save_thread.start()
        if run.detached:
            return self._ok(msg, meta={"save": run.id, "mode": mode, "cursor": cursor, "dir": target.location})
        return None  # answered when written

    def _write_save(self, run: _Save, managed: Path | None, points: dict[str, TableSave],
                    dense: dict[str, tuple[DenseTable, dict[str, Any]]], dense_meta: dict[str, dict[str, Any]]) -> None:
        """The save thread: write what the consistent point holds, then tell the loop."""
        save_dir, mode, cursor = run.target.local, run.mode, run.cursor
        try:
            try:
                save_dir.mkdir(parents=True, exist_ok=True)
                for name in list(points):
                    points.pop(name).write()
            finally:
                for point in points.values():  # a table failed: the others give their snapshots up
                    point.abort()
            for name, (table, snap) in dense.items():
                table.write_snapshot(save_dir / "dense" / name, snap)
            entry = write_save_manifest(save_dir, {"shard": self.index, "mode": mode, "cursor": cursor,
                                                   "sparse": sorted(self.sparse), "dense": dense_meta})
            run.target.upload()
            if managed is None and cursor == "checkpoint" and self._checkpoint_root is not None \
                    and run.target.remote is None:
                managed = shard_dir(self._checkpoint_root, self.index)  # a restart restores client-named saves too
            if managed is not None:
                commit_managed(managed, save_dir, mode)
            run.entry = {"save": run.id, "mode": mode, "cursor": cursor, "dir": run.target.location,
                         "manifest": entry}
        except Exception as exc:
            self._based.discard(cursor)  # the chain may be broken: the next save on it is a base
            if not isinstance(exc, StreamrecError):
                log.exception("shard %d: save failed", self.index)
            cause = exc.message if isinstance(exc, StreamrecError) else f"{type(exc).__name__}: {exc}"
            cls = type(exc) if isinstance(exc, StreamrecError) else StreamrecError
            run.error = cls(f"shard {self.index}: save into {run.target.location} failed: {cause}",
                            detail={"shard": self.index, "dir": run.target.location})
            self._count_error(run.error)
        run.target.cleanup()
        with self._done_lock:
            self._done_tx.send(b"")

    def _save_written(self, sock: zmq.Socket) -> None:
        """In the loop: the save thread finished; answer whoever waits for it."""
        run = self._save
        assert run is not None
        if self._save_thread is not None:
            self._save_thread.join()
            self._save_thread = None
        run.written = True
        if not run.detached:
            sock.send_multipart([run.ident, *run.reply(Op.SAVE, run.msg.request_id)], copy=False)
        for who, rid in run.waiters:
            sock.send_multipart([who, *run.reply(Op.SAVE_WAIT, rid)], copy=False)
        run.waiters.clear()
        for who, rid in self._idle_waiters:
            self._reply(sock, who, Message(Op.SAVE_WAIT, rid, meta={"idle": True, "save": run.id}))
        self._idle_waiters.clear()

    def _save_wait(self, sock: zmq.Socket, ident: bytes, msg: Message) -> Message | None:
        """SAVE_WAIT {save}: that save's entry (or error) once written; without a save id, an
        empty answer once no save is running (a restarting trainer lets an orphaned save end)."""
        wanted = msg.meta.get("save")
        run = self._save
        if wanted is None:
            if self._saving:
                self._idle_waiters.append((ident, msg.request_id))
                return None
            return self._ok(msg, meta={"idle": True, "save": None if run is None else run.id})
        if run is None or run.id != wanted:
            raise NotFound(f"shard {self.index}: save {wanted!r} is unknown (the shard restarted, or a newer save "
                           f"{None if run is None else run.id!r} replaced it)", detail={"shard": self.index})
        if run.written:
            sock.send_multipart([ident, *run.reply(Op.SAVE_WAIT, msg.request_id)], copy=False)
        else:
            run.waiters.append((ident, msg.request_id))
        return None

    def _load_request(self, msg: Message) -> None:
        if self._saving:
            raise Conflict(f"shard {self.index}: cannot load while a save is running")
        dirs = msg.meta.get("dirs")
        if dirs is not None:
            if not isinstance(dirs, list) or not all(isinstance(d, str) for d in dirs):
                raise InvalidInput("load: 'dirs' must be a list of directories")
            with fetched(dirs, scratch=self._checkpoint_root) as local_dirs:  # URLs are downloaded first
                self._restore(local_dirs)
            self.restored_from = dirs[-1]
        else:
            self._restore(managed_saves(self._managed_dir(msg)))

    def _restore(self, save_dirs: list[Path]) -> None:
        plan = restore_plan(save_dirs)
        for save_dir, man in plan:
            for name in man["sparse"]:
                if name in self.sparse:
                    self.sparse[name].load(save_dir / "sparse" / name)
        last_dir, last = plan[-1]
        for name, meta in last["dense"].items():
            cfg = DenseTableConfig(name=name, optimizer=OptimizerConfig.model_validate(meta["optimizer"]))
            table = DenseTable(cfg, initial=np.zeros(meta["size"], np.float32))
            table.load(last_dir / "dense" / name)
            self.dense[name] = table
            self._dense_meta[name] = dict(meta)
        self._based.clear()
        self.restored_from = str(last_dir)
        log.info("shard %d restored %d saves ending at %s", self.index, len(plan), last_dir)

    def stats(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "pid": os.getpid(),
            "restored_from": self.restored_from,
            "requests": dict(self.requests),
            "errors": dict(self.errors),
            "tables": {n: t.stats() for n, t in self.sparse.items()},
            "dense": {n: m["size"] for n, m in self._dense_meta.items()},
        }
