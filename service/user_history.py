"""The served user history: /v1/recommend and /v1/predict for a known user read the user's
latest behaviour, as the towers were trained with it.

When the bundle's schema has ``history`` and the model a user-tower slot of that name, a
record that does not send the slot gets its user's history as the trainers keep it (the
id-rows table ``ids.history``, :mod:`trainer.history_join`): from the live shards through the
read-through client when one is configured and answers (an event shows up as soon as its batch
was prepared), else from the served bundle's own saves of that table (as of its pass). A
record that sends the slot is served with what it sent. The user is the first id of the
schema's ``user_id`` slot; no id, no history. A predict batch reads each distinct user once.

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

from core.errors import CorruptData, StreamrecError
from exports.bundle import BundleManifest, read_manifest
from exports.history_table import HISTORY_TABLE, history_words, slot_ids
from logrecords.batch import Batch
from logrecords.schema_config import SchemaConfig
from ps.routing import shard_of
from service.model_store import Side
from service.read_through import ReadThrough
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

    def slot(self, side: Side) -> str | None:
        """The model's history slot when the bundle's schema names one (the slot :meth:`complete` fills)."""
        schema = self._schema_of(side)
        if schema is None or schema.history is None or side.model is None:
            return None
        name = schema.history.slot
        return name if any(s.name == name for s in side.model.slots) else None

    def complete(self, side: Side, batch: Batch) -> Batch:
        """``batch`` with each record's history slot filled with its user's, unless there is none to
        fill or the record sent its own (a non-empty list)."""
        schema = self._schema_of(side)
        if schema is None or schema.history is None or side.model is None or schema.user_id is None:
            return batch
        slot = schema.history.slot
        if all(s.name != slot for s in side.model.slots):
            return batch
        n = len(batch)
        users = _first_ids(batch, schema.user_id, n)
        sent_values, sent_offsets = batch.slots.get(slot, (np.empty(0, np.uint64), np.zeros(n + 1, np.int64)))
        lengths = np.diff(sent_offsets)
        need = (lengths == 0) & (users != 0)
        if not need.any():
            return batch
        uniq, inv = np.unique(users[need], return_inverse=True)
        ids, _, stored_len = ring_unroll(self.rows(side, uniq, history_words(schema)))
        lengths = lengths.copy()
        lengths[need] = stored_len[inv]
        offsets = np.zeros(n + 1, np.int64)
        np.cumsum(lengths, out=offsets[1:])
        values = np.empty(int(offsets[-1]), np.uint64)
        keep = ~need  # the records' own lists (maybe empty), moved to their new places
        values[_ranges(offsets[:-1][keep], lengths[keep])] = sent_values[
            _ranges(sent_offsets[:-1][keep], lengths[keep])]
        mine = np.arange(ids.shape[1])[None, :] < stored_len[inv][:, None]  # (records in need, ring length)
        values[(offsets[:-1][need][:, None] + np.arange(ids.shape[1])[None, :])[mine]] = slot_ids(
            schema, ids[inv][mine])
        return dataclasses.replace(batch, slots={**batch.slots, slot: (values, offsets)})

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
        out = np.zeros((user.shape[0], words), np.uint64)
        if not tables:
            return out
        shard = shard_of(user, len(tables))
        for s in np.unique(shard).tolist():
            on = shard == s
            out[on] = tables[s].read(user[on])[0]
        return out

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
                if man.parent_version is None:
                    raise CorruptData(f"bundle {man.version}: a delta without a parent version")
                man = read_manifest(self.root, man.parent_version)
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


def _first_ids(batch: Batch, slot: str, n: int) -> np.ndarray:
    """Each record's first id in ``slot`` (0: none)."""
    out = np.zeros(n, np.uint64)
    got = batch.slots.get(slot)
    if got is not None:
        values, offsets = got
        has = offsets[1:] > offsets[:-1]
        out[has] = values[offsets[:-1][has]]
    return out


def _ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The concatenated ``arange(start, start + length)`` of each pair, vectorised."""
    total = int(lengths.sum())
    if total == 0:
        return np.empty(0, np.int64)
    ends = np.cumsum(lengths)
    return np.repeat(starts - (ends - lengths), lengths) + np.arange(total)


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
