"""The served user history (#11): /v1/recommend for a known user reads the user's latest behaviour.

When the bundle's schema has ``history`` and the model a user-tower slot of that name, a
request that does not send the slot gets the user's history as the trainers keep it (the
id-rows table ``ids.history``, :mod:`trainer.history_join`): from the live shards through the
read-through client when one is configured and answers (an event shows up as soon as its batch
was prepared), else from the served bundle's own saves of that table (as of its pass). A
request that sends the slot is served with what it sent. The user is the first id of the
schema's ``user_id`` slot; no id, no history.

When the shards do not answer within the read-through's timeout, the bundle's history is
served and the shards are asked again only after ``LIVE_BACKOFF_S``: while they are down or
swamped, each request would otherwise wait the whole timeout (5x the recommend p99 target).

The bundle's history tables are loaded once per bundle version, by the first request that
needs them after a swap (one load of one table per shard; a delta bundle applies on the
tables already loaded).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import numpy as np
from fastapi import Depends, Request

from core.errors import StreamrecError
from exports.bundle import BundleManifest, read_manifest
from exports.history_table import HISTORY_TABLE, history_words, slot_ids
from ps.routing import shard_of
from service.model_store import Side
from service.read_through import ReadThrough
from streaming.batch import Batch
from streaming.stream_config import SchemaConfig
from tables.id_rows_kernels import ring_unroll
from tables.id_rows_table import IdRowsTable, id_rows_config

log = logging.getLogger(__name__)
LIVE_BACKOFF_S = 1.0  # after the shards missed a read, serve the bundle's history this long before asking again


class UserHistory:
    def __init__(self, root: Path, read_through: ReadThrough | None, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.root = Path(root)
        self.read_through = read_through
        self._clock = clock
        self._live_after = float("-inf")  # no live read before this time (a back-off after a miss)
        self._lock = threading.Lock()
        self._schemas: dict[int | None, SchemaConfig | None] = {}
        self._version: int | None = None  # the bundle version the tables below are at
        self._tables: list[IdRowsTable] = []
        self.live_reads = 0
        self.live_misses = 0  # live reads the shards did not answer in time
        self.bundle_reads = 0
        self.last_error: str | None = None

    def key_slots(self, side: Side) -> tuple[str, ...]:
        """The slot whose id keys the user's history (the schema's ``user_id``) when the history is
        served, so a request carries it even where the model's towers leave the user id out."""
        schema = self._schema_of(side)
        if schema is None or schema.history is None or schema.user_id is None or side.model is None:
            return ()
        return (schema.user_id,)

    def complete(self, side: Side, batch: Batch) -> Batch:
        """``batch`` (one user) with the history slot filled, unless there is none to fill or it was sent."""
        schema = self._schema_of(side)
        if schema is None or schema.history is None or side.model is None or schema.user_id is None:
            return batch
        slot = schema.history.slot
        if all(s.name != slot for s in side.model.slots) or _ids(batch, slot).size:
            return batch
        user = _ids(batch, schema.user_id)[:1]
        if not user.size:
            return batch
        words = history_words(schema)
        rows = self.rows(side, user, words)
        ids, _, lengths = ring_unroll(rows)
        hist = slot_ids(schema, ids[0, : lengths[0]])
        return dataclasses.replace(batch, slots={**batch.slots, slot: (hist, np.array([0, hist.shape[0]], np.int64))})

    def rows(self, side: Side, user: np.ndarray, words: int) -> np.ndarray:
        """History rows (uint64 (n, words)) of ``user``: live from the shards when they answer,
        else the bundle's (zeros for users it does not have)."""
        rt = self.read_through
        if rt is not None and not rt.paused and self._clock() >= self._live_after:
            missed = rt.unavailable
            live = rt.id_rows(HISTORY_TABLE, user, words)
            if live is not None:
                self.live_reads += 1
                return live
            if rt.unavailable > missed:  # timed out: back off rather than make every request wait
                self.live_misses += 1
                self._live_after = self._clock() + LIVE_BACKOFF_S
        self.bundle_reads += 1
        try:
            tables = self._bundle_tables(side, words)
        except StreamrecError as err:  # e.g. a pruned parent bundle: serve without history, say why once
            if self.last_error != err.message:
                log.warning("user history from bundle %s unavailable: %s", side.version, err.message)
            self.last_error = err.message
            tables = []
        if not tables:
            return np.zeros((user.shape[0], words), np.uint64)
        return tables[int(shard_of(user[:1], len(tables))[0])].read(user)[0]

    def _schema_of(self, side: Side) -> SchemaConfig | None:
        if side.version not in self._schemas:
            raw = None if side.manifest is None else side.manifest.schema
            self._schemas = {side.version: None if raw is None else SchemaConfig.model_validate(raw)}
        return self._schemas[side.version]

    def _bundle_tables(self, side: Side, words: int) -> list[IdRowsTable]:
        """The bundle's history tables at ``side.version``: its chain applied from its base, or
        from the version loaded before when the chain passes through it."""
        with self._lock:
            if side.version is None or side.manifest is None or side.version == self._version:
                return self._tables
            chain: list[BundleManifest] = []
            man = side.manifest
            while True:
                chain.append(man)
                if man.kind == "base" or man.parent_version == self._version:
                    break
                man = read_manifest(self.root, man.parent_version)  # type: ignore[arg-type]
            tables = self._tables if chain[-1].kind == "delta" else [
                IdRowsTable(id_rows_config(HISTORY_TABLE, words)) for _ in range(side.manifest.num_shards)]
            for m in reversed(chain):
                for i, t in enumerate(tables):
                    d = m.table_dir(self.root, i, HISTORY_TABLE)
                    if (d / f"{HISTORY_TABLE}.manifest.json").is_file():
                        t.load(d)
            self._tables, self._version = tables, side.version
            return tables

    def status(self) -> dict[str, Any]:
        return {"live_reads": self.live_reads, "live_misses": self.live_misses, "bundle_reads": self.bundle_reads,
                "bundle_version": self._version, "last_error": self.last_error}


def _ids(batch: Batch, slot: str) -> np.ndarray:
    got = batch.slots.get(slot)
    if got is None:
        return np.empty(0, np.uint64)
    values, offsets = got
    return values[offsets[0] : offsets[1]]


async def user_history_of(request: Request) -> UserHistory:
    """The app's UserHistory, made on first use from its model store and read-through client.
    (async: FastAPI runs a plain ``def`` dependency in its thread pool, two thread wake-ups per
    request that a loaded machine delays by milliseconds: the recommend p99.)"""
    state = request.app.state
    history = getattr(state, "user_history", None)
    if history is None:
        history = state.user_history = UserHistory(state.store.root, getattr(state, "read_through", None))
    return history


HistoryDep = Annotated[UserHistory, Depends(user_history_of)]
