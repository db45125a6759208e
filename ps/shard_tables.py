"""A shard's tables and the data-plane ops on them: sparse pull/push, dense init/pull/push.

Every check a request needs before it touches a table lives here (table known, keys uint64,
gradients float32 of the table's width); pushes flagged SYNC are held in :mod:`ps.sync_steps`
until the step's barrier, GEO_DELTA pushes are row deltas the table adds.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from core.errors import Conflict, InvalidInput, NotFound, StreamrecError
from ps.protocol import Flag, Message, check_keys
from ps.pull_reply import PullReplyFrames
from ps.shard_requests import arrays_of, ok
from ps.staleness import StalenessSample
from ps.sync_steps import HeldGradients, SyncSteps, adds_geo_deltas
from tables.admission import DEFAULT_SKETCH_SHARE
from tables.budget import share_shard_budget
from tables.dense_table import DenseTable
from tables.id_rows_table import IdRowsTable, id_rows_config
from tables.sparse_table import SparseTable
from tables.table_config import DEFAULT_DENSE_OPTIMIZER, DenseTableConfig, OptimizerConfig, TableConfig, TierConfig

# the flags as plain ints: IntFlag's & runs as Python code, microseconds on every request
_EXISTING, _GEO_DELTA, _SYNC, _UNIQUE = int(Flag.EXISTING), int(Flag.GEO_DELTA), int(Flag.SYNC), int(Flag.UNIQUE)
_U64 = np.dtype(np.uint64)


class ShardTables:
    """Shard ``index``'s sparse tables (from its config) and dense parts (made by ``init_dense``);
    ``id_rows_tier``: the disk tier of the id-rows tables it makes (None: RAM only)."""

    def __init__(self, configs: Sequence[TableConfig], *, index: int, max_bytes: int | None = None,
                 sketch_share: float = DEFAULT_SKETCH_SHARE, staleness_sample: int = 0,
                 id_rows_tier: TierConfig | None = None) -> None:
        self.index = index
        self.id_rows_tier = id_rows_tier
        # rows' staleness of 1 in staleness_sample keys (ps.staleness); off: None, one test per pull and push
        self.staleness = StalenessSample(staleness_sample) if staleness_sample else None
        self.sparse: dict[str, SparseTable] = {t.name: SparseTable(t, sketch_share=sketch_share) for t in configs}
        self.max_bytes = max_bytes
        share_shard_budget(list(self.sparse.values()), max_bytes)  # the PS config's shard.max_bytes
        self.dense: dict[str, DenseTable] = {}
        self.dense_meta: dict[str, dict[str, Any]] = {}  # name -> {size, optimizer}: what a save records
        self.sync = SyncSteps()
        self._reply_frames: dict[str, PullReplyFrames] = {}  # per table, made at its first small pull

    def add_sparse(self, table: SparseTable) -> None:
        """A table made after start (an id-rows table, by its first write, ps.shard_id_rows): the
        shard's ``max_bytes`` is shared again over all of them."""
        self.sparse[table.name] = table
        share_shard_budget(list(self.sparse.values()), self.max_bytes)

    def add_id_rows(self, name: str, words: int, *, ttl_passes: int | None = None) -> IdRowsTable:
        """Make id-rows table ``name`` of ``words`` words a row, on the shard's id-rows tier, and add it."""
        table = IdRowsTable(id_rows_config(name, words, ttl_passes=ttl_passes, tier=self.id_rows_tier))
        self.add_sparse(table)
        return table

    def table(self, name: str) -> SparseTable:
        table = self.sparse.get(name)
        if table is None:
            raise NotFound(f"shard {self.index} has no sparse table {name!r} (has {sorted(self.sparse)})")
        return table

    def dense_part(self, name: str) -> DenseTable:
        table = self.dense.get(name)
        if table is None:
            raise NotFound(f"shard {self.index} has no dense array {name!r}; call init_dense first")
        return table

    # ---------------------------------------------------------------- sparse
    def pull(self, msg: Message) -> Message:
        # checks inline, the reply built directly: this is the op a small-pull round trip waits on
        arrays = msg.arrays
        keys = arrays[0] if len(arrays) == 1 else arrays_of(msg, 1)[0]
        if keys.dtype != _U64 or keys.ndim != 1:
            check_keys(keys)  # raises, naming what the keys are
        table = self.sparse.get(msg.table)
        if table is None:
            table = self.table(msg.table)  # raises NotFound
        if int(msg.flags) & _EXISTING:
            rows, found = table.pull_existing(keys)
            return ok(msg, rows, found.view(np.uint8))
        if self.staleness is not None:
            self.staleness.pulled(msg.meta.get("tag"), msg.table, keys)
        return Message(msg.op, msg.request_id, msg.table, [table.pull(keys)], {})

    def pull_frame(self, msg: Message, incarnation: int) -> memoryview | None:
        """A small pull's whole reply frame, its rows gathered straight into the table's
        preallocated reply buffer (:mod:`ps.pull_reply`; send it before the next call); None
        when :meth:`pull` must answer (an existing-only pull, rows too big to travel inline, or
        a request to refuse)."""
        arrays = msg.arrays
        if len(arrays) != 1 or int(msg.flags) & _EXISTING:
            return None
        keys = arrays[0]
        name = msg.table
        table = self.sparse.get(name)
        if table is None or keys.dtype != _U64 or keys.ndim != 1:
            return None
        frames = self._reply_frames.get(name)
        if frames is None or frames.incarnation != incarnation or frames.width != table.width:
            frames = self._reply_frames[name] = PullReplyFrames(name, table.width, incarnation)
        n = keys.shape[0]
        if n > frames.max_rows:
            return None
        frame, rows = frames.frame(msg.request_id, n)
        table.pull(keys, out=rows)
        if self.staleness is not None:
            self.staleness.pulled(msg.meta.get("tag"), name, keys)
        return frame

    def push(self, msg: Message) -> Message:
        arrays = arrays_of(msg, 2, 4)
        keys, grads = check_keys(arrays[0]), arrays[1]
        shows, clicks = (arrays[2], arrays[3]) if len(arrays) == 4 else (None, None)
        table = self.table(msg.table)
        if grads.dtype != np.float32 or grads.shape != (keys.shape[0], table.width):
            raise InvalidInput(
                f"table {msg.table!r}: grads must be float32 ({keys.shape[0]}, {table.width}), "
                f"got {grads.dtype} {grads.shape}"
            )
        flags = int(msg.flags)
        if flags & _GEO_DELTA:
            if not adds_geo_deltas(table.config.optimizer):
                raise InvalidInput(f"table {msg.table!r}: geo deltas need optimizer sgd with lr 1, no l2, no clip")
            grads = -grads  # sgd with lr 1: w -= -delta adds the delta
        if flags & _SYNC:
            self.sync.hold_sparse(msg.table, keys, grads, shows, clicks)
        else:
            if self.staleness is not None:
                self.staleness.pushed(msg.meta.get("tag"), msg.table, keys)
            received_at = msg.meta.get("received_at")  # the change log's time of these keys
            table.push(keys, grads, shows=shows, clicks=clicks, unique=bool(flags & _UNIQUE),
                       received_at=float(received_at) if isinstance(received_at, (int, float)) else None)
        return ok(msg)

    # ---------------------------------------------------------------- dense
    def init_dense(self, msg: Message) -> Message:
        """Create the dense part unless it exists; replies with the optimizer it runs."""
        (initial,) = arrays_of(msg, 1)
        if initial.dtype != np.float32 or initial.ndim != 1:
            raise InvalidInput(
                f"dense {msg.table!r}: initial value must be 1-d float32, got {initial.ndim}-d {initial.dtype}"
            )
        existing = self.dense_meta.get(msg.table)
        if existing is not None:
            if existing["size"] != initial.shape[0]:
                raise Conflict(f"dense {msg.table!r} exists with {existing['size']} elements; init with "
                               f"{initial.shape[0]} refused")
            return ok(msg, meta={"optimizer": existing["optimizer"]})  # first writer wins
        optimizer = OptimizerConfig.model_validate(msg.meta.get("optimizer", DEFAULT_DENSE_OPTIMIZER.model_dump()))
        cfg = DenseTableConfig(name=msg.table, optimizer=optimizer)
        self.dense[msg.table] = DenseTable(cfg, initial=np.array(initial))
        self.dense_meta[msg.table] = {"size": int(initial.shape[0]), "optimizer": optimizer.model_dump()}
        return ok(msg, meta={"optimizer": self.dense_meta[msg.table]["optimizer"]})

    def pull_dense(self, msg: Message) -> Message:
        return ok(msg, self.dense_part(msg.table).pull())

    def push_dense(self, msg: Message) -> Message:
        (grad,) = arrays_of(msg, 1)
        table = self.dense_part(msg.table)
        size = self.dense_meta[msg.table]["size"]
        if grad.dtype != np.float32 or grad.shape != (size,):
            raise InvalidInput(f"dense {msg.table!r}: grad must be float32 ({size},), got {grad.dtype} {grad.shape}")
        if msg.flags & Flag.SYNC:
            self.sync.hold_dense(msg.table, grad)
        else:
            table.push(grad, lr_scale=msg.meta.get("lr_scale", 1.0))
        return ok(msg)

    def add_dense(self, name: str, meta: dict[str, Any], table: DenseTable) -> None:
        """A restored dense part (``meta``: its size and optimizer as saved)."""
        self.dense[name] = table
        self.dense_meta[name] = dict(meta)

    # ---------------------------------------------------------------- passes and sync steps
    def apply_held(self, held: HeldGradients) -> list[StreamrecError]:
        """Apply what a barrier released, one push per table; the errors of the tables that failed."""
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
        return failures

    def shrink(self, msg: Message) -> Message:
        return ok(msg, meta={"evicted": {n: int(t.shrink()) for n, t in self.sparse.items()}})

    def end_pass(self, msg: Message) -> Message:
        return ok(msg, meta={"passes": {n: int(t.end_pass()) for n, t in self.sparse.items()}})
