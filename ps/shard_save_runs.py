"""A shard's saves and restores: two-phase saves run beside the request loop.

A save is two steps. The request loop takes its consistent point for every table at once
(a base starts a copy-on-write snapshot, a delta copies its changed rows; dense parts are
copied), so no request lands between the tables' points; a background thread then writes
(the tables are thread-safe, so pushes keep flowing) and tells the loop through
``notify_written``, because ZeroMQ sockets belong to one thread. A plain SAVE is answered
when the files are written; a DETACH save right after the consistent point, and SAVE_WAIT
collects its entry or error later. One save runs at a time: a SAVE during a running one is
refused (Conflict naming the running save); SAVE_WAIT is how to wait for it. The last few
written saves stay collectable: a save broadcast to every shard may start on a shard whose
previous save just ended while another shard refuses it, and the earlier save's waiter
must still get its answer there.
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from core.errors import Conflict, CorruptData, InvalidInput, NotFound, StreamrecError
from ps import protocol
from ps.placement import Placement
from ps.protocol import Flag, Message, Op
from ps.routing import DEFAULT_SLICE_MIN_ELEMENTS
from ps.shard_replace import replay, restore_replaced
from ps.shard_requests import Outbox, ok
from ps.shard_saves import (
    commit_managed,
    managed_saves,
    next_managed_dir,
    restore_plan,
    shard_dir,
    write_save_manifest,
)
from ps.shard_tables import ShardTables
from stores.staging import StagedSave, fetched
from tables.dense_table import DenseTable
from tables.table_files import TableSave

log = logging.getLogger(__name__)

KEPT_SAVES = 16  # written saves SAVE_WAIT can still collect by id


@dataclass
class SaveRun:
    """This shard's running save, or its last one (kept so SAVE_WAIT can collect it)."""

    id: str
    ident: bytes  # who asked for it
    msg: Message  # its SAVE request
    target: StagedSave  # where it is written here, and the client's dir (a path, or a URL it is uploaded to)
    mode: str
    cursor: str
    placement: dict[str, Any] | None = None  # the client's routing when it asked (ps.placement)
    started: float = field(default_factory=time.monotonic)
    waiters: list[tuple[bytes, int]] = field(default_factory=list)  # SAVE_WAIT requests to answer when written
    written: bool = False
    entry: dict[str, Any] = field(default_factory=dict)  # the reply meta once written
    error: StreamrecError | None = None

    @property
    def detached(self) -> bool:
        return bool(self.msg.flags & Flag.DETACH)

    def reply(self, op: Op, rid: int, incarnation: int) -> list[Any]:
        """Frames answering ``op``/``rid`` with this (written) save's outcome."""
        if self.error is not None:
            return protocol.error_reply(op, rid, self.error, incarnation=incarnation)
        return protocol.encode(Message(op, rid, meta=self.entry, incarnation=incarnation))


class ShardSaveRuns:
    """The SAVE, SAVE_WAIT and LOAD ops of shard ``tables.index``; restores at start-up."""

    def __init__(self, tables: ShardTables, *, checkpoint_root: Path | None,
                 count_error: Callable[[StreamrecError], None]) -> None:
        self._tables = tables
        self._index = tables.index
        self._checkpoint_root = checkpoint_root
        self._count_error = count_error
        self.notify_written: Callable[[], None] = lambda: None  # set by the loop: wakes it from the save thread
        self._thread: threading.Thread | None = None
        self._run: SaveRun | None = None  # the running or last save
        self._kept: OrderedDict[str, SaveRun] = OrderedDict()  # written saves, oldest first
        self._idle_waiters: list[tuple[bytes, int]] = []  # SAVE_WAIT without a save id: any running save
        self._based: set[str] = set()  # cursors this process wrote a base on (deltas may follow)
        self.restored_from: str | None = None

    @property
    def saving(self) -> bool:
        return self._run is not None and not self._run.written

    def join(self) -> None:
        """Let a running save thread finish (the loop is ending)."""
        if self._thread is not None:
            self._thread.join()

    # ---------------------------------------------------------------- SAVE
    def start(self, ident: bytes, msg: Message) -> Message | None:
        mode, cursor = msg.meta.get("mode", "base"), msg.meta.get("cursor", "checkpoint")
        if mode not in ("base", "delta") or not isinstance(cursor, str):
            raise InvalidInput(f"save mode must be 'base' or 'delta' and cursor a string, got {mode!r}, {cursor!r}")
        placement = _placement(msg.meta.get("placement"), "save") if "placement" in msg.meta else None
        if self.saving:
            run = self._run
            assert run is not None
            raise Conflict(f"shard {self._index}: a save is already running ({run.mode} on cursor {run.cursor!r} "
                           f"into {run.target.location}, for {time.monotonic() - run.started:.1f} s); wait for it "
                           "(save_wait)",
                           detail={"shard": self._index, "save": run.id})
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
            for name, table in self._tables.sparse.items():
                points[name] = table.begin_save(save_dir / "sparse" / name, mode=mode, cursor=cursor)
        except BaseException:
            for point in points.values():
                point.abort()
            target.cleanup()
            raise
        dense = {name: (table, table.snapshot()) for name, table in self._tables.dense.items()}
        dense_meta = {k: dict(v) for k, v in self._tables.dense_meta.items()}
        self._based.add(cursor)
        run = SaveRun(os.urandom(8).hex(), ident, msg, target, mode, cursor,
                      None if placement is None else placement.to_meta())
        self._run = run
        self._thread = threading.Thread(target=self._write, args=(run, managed, points, dense, dense_meta),
                                        name="save", daemon=True)
        self._thread.start()
        if run.detached:
            return ok(msg, meta={"save": run.id, "mode": mode, "cursor": cursor, "dir": target.location})
        return None  # answered when written

    def _write(self, run: SaveRun, managed: Path | None, points: dict[str, TableSave],
               dense: dict[str, tuple[DenseTable, dict[str, Any]]], dense_meta: dict[str, dict[str, Any]]) -> None:
        """The save thread: write what the consistent point holds, then tell the loop."""
        save_dir, mode, cursor = run.target.local, run.mode, run.cursor
        saved = sorted(points)  # the tables of the consistent point (an id-rows table may be made since)
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
            placed = {} if run.placement is None else {"placement": run.placement}
            entry = write_save_manifest(save_dir, {"shard": self._index, "mode": mode, "cursor": cursor,
                                                   "sparse": saved, "dense": dense_meta, **placed})
            run.target.upload()
            if managed is None and cursor == "checkpoint" and self._checkpoint_root is not None \
                    and run.target.remote is None:
                managed = shard_dir(self._checkpoint_root, self._index)  # a restart restores client-named saves too
            if managed is not None:
                commit_managed(managed, save_dir, mode)
            run.entry = {"save": run.id, "mode": mode, "cursor": cursor, "dir": run.target.location,
                         "manifest": entry, **placed}
            log.info("shard %d saved %d tables (%s, %s) into %s", self._index, len(saved) + len(dense), mode, cursor,
                     run.target.location)
        except Exception as exc:
            self._based.discard(cursor)  # the chain may be broken: the next save on it is a base
            if not isinstance(exc, StreamrecError):
                log.exception("shard %d: save failed", self._index)
            cause = exc.message if isinstance(exc, StreamrecError) else f"{type(exc).__name__}: {exc}"
            cls = type(exc) if isinstance(exc, StreamrecError) else StreamrecError
            run.error = cls(f"shard {self._index}: save into {run.target.location} failed: {cause}",
                            detail={"shard": self._index, "dir": run.target.location})
            self._count_error(run.error)
        run.target.cleanup()
        self.notify_written()

    def written(self, outbox: Outbox) -> None:
        """In the loop: the save thread finished; answer whoever waits for it."""
        run = self._run
        assert run is not None
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        run.written = True
        self._kept[run.id] = run
        while len(self._kept) > KEPT_SAVES:
            self._kept.popitem(last=False)
        if not run.detached:
            outbox.send(run.ident, run.reply(Op.SAVE, run.msg.request_id, outbox.incarnation), copy=False)
        for who, rid in run.waiters:
            outbox.send(who, run.reply(Op.SAVE_WAIT, rid, outbox.incarnation), copy=False)
        run.waiters.clear()
        for who, rid in self._idle_waiters:
            outbox.reply(who, Message(Op.SAVE_WAIT, rid, meta={"idle": True, "save": run.id}))
        self._idle_waiters.clear()

    # ---------------------------------------------------------------- SAVE_WAIT
    def wait(self, outbox: Outbox, ident: bytes, msg: Message) -> Message | None:
        """SAVE_WAIT {save}: that save's entry (or error) once written; without a save id, an
        empty answer once no save is running (a restarting trainer lets an orphaned save end)."""
        wanted = msg.meta.get("save")
        run = self._run
        if wanted is None:
            if self.saving:
                self._idle_waiters.append((ident, msg.request_id))
                return None
            return ok(msg, meta={"idle": True, "save": None if run is None else run.id})
        if run is None or run.id != wanted:
            run = self._kept.get(wanted) if isinstance(wanted, str) else None
        if run is None:
            raise NotFound(f"shard {self._index}: save {wanted!r} is unknown (the shard restarted, or it is older "
                           f"than its last {KEPT_SAVES} saves)", detail={"shard": self._index})
        if run.written:
            outbox.send(ident, run.reply(Op.SAVE_WAIT, msg.request_id, outbox.incarnation), copy=False)
        else:
            run.waiters.append((ident, msg.request_id))
        return None

    # ---------------------------------------------------------------- LOAD and restore
    def load(self, msg: Message) -> Message:
        if self.saving:
            raise Conflict(f"shard {self._index}: cannot load while a save is running")
        dirs, sources = msg.meta.get("dirs"), msg.meta.get("sources")
        if sources is not None:
            if not isinstance(sources, list) or not sources or not all(
                    isinstance(d, list) and all(isinstance(x, str) for x in d) for d in sources):
                raise InvalidInput("load: 'sources' must be a non-empty list of lists of directories")
            placement = _placement(msg.meta.get("placement"), "load")
            if not 0 <= self._index < placement.n_shards:
                raise InvalidInput(f"load: a placement over {placement.n_shards} shards has no shard {self._index}")
            slice_min = msg.meta.get("dense_slice_min_elements", DEFAULT_SLICE_MIN_ELEMENTS)
            if not isinstance(slice_min, int) or isinstance(slice_min, bool) or slice_min < 1:
                raise InvalidInput("load: 'dense_slice_min_elements' must be a positive integer")
            flat = [d for group in sources for d in group]
            with fetched(flat, scratch=self._checkpoint_root) as local:  # URLs are downloaded first
                bounds = np.cumsum([0, *(len(g) for g in sources)])
                restore_replaced(self._tables, [list(local[a:b]) for a, b in itertools.pairwise(bounds)],
                                 placement, slice_min)
            self._based.clear()  # the next save on every cursor is a base
            self.restored_from = f"{len(sources)} shards' saves ending at {sources[0][-1]}"
        elif dirs is not None:
            if not isinstance(dirs, list) or not all(isinstance(d, str) for d in dirs):
                raise InvalidInput("load: 'dirs' must be a list of directories")
            with fetched(dirs, scratch=self._checkpoint_root) as local_dirs:  # URLs are downloaded first
                self.restore(local_dirs)
            self.restored_from = dirs[-1]
        else:
            self.restore(managed_saves(self._managed_dir(msg)))
        return ok(msg)

    def restore(self, save_dirs: list[Path]) -> None:
        """Replay ``save_dirs`` (oldest first) from their newest base on, once every file of
        the chain verified (a corrupt one raises CorruptData naming it, nothing loaded)."""
        plan = restore_plan(save_dirs)
        replay(self._tables, plan)
        self._based.clear()
        last_dir = plan[-1][0]
        self.restored_from = str(last_dir)
        log.info("shard %d restored %d saves ending at %s", self._index, len(plan), last_dir)

    def _managed_dir(self, msg: Message) -> Path:
        root = msg.meta.get("path")
        if root is None:
            if self._checkpoint_root is None:
                raise InvalidInput(f"shard {self._index} has no --checkpoint-dir; pass a directory")
            root = self._checkpoint_root
        return shard_dir(root, self._index)


def _placement(meta: Any, op: str) -> Placement:
    try:
        return Placement.from_meta(meta, f"{op} request")
    except CorruptData as err:
        raise InvalidInput(err.message) from None
