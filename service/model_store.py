"""The model store: what the service serves, swapped atomically bundle by bundle.

Two *sides* (left-right): readers pin the active side for a whole request; a bundle is applied
to the standby side, the sides swap with one reference assignment, and once the old side's
readers drained, the same bundle is applied to it. So a reader never sees half a bundle, and
applying a 100k-row delta costs two delta loads rather than a copy of every table. The price
is two copies of the tables in memory. A bundle that fails on the standby is rejected (its
error recorded for /admin/status), the active side keeps serving, and the standby is rebuilt
by replaying the active version's chain (base + deltas) before the next bundle.

Per side: for every table a ``SparseTable`` per shard (ids routed with ``ps.routing``), the
dense weights, the model config, and the item index snapshot.

Bundles get deleted by the trainer's retention (exports.retention), which spares the chain the
service pins (:meth:`ModelStore.pinned`: the served chain and the bundle being applied). One
deleted all the same between the listing and its load is skipped, not rejected: ``vanished``
counts it and the next poll starts from the newest base there is. A base does not need the
standby rebuilt first (it replaces every table), so a served chain that went cannot block one.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from pydantic import ValidationError

from core.errors import Conflict, CorruptData, NotFound, StreamrecError, Unavailable
from exports.bundle import MANIFEST, BundleManifest, bundle_dir, load_dense, load_items, read_manifest
from exports.predictor import Predictor
from exports.raw_records import RecordHasher, record_hasher
from models.model_config import ModelConfig
from ps.routing import plan_keys, shard_of, shard_of_key
from service.cold_start import PopularItems, popular_items
from service.popularity_prior import ItemCounts, item_counts
from service.settings import IndexSettings
from service.vector_index import ItemIndex
from tables.sparse_table import SparseTable

log = logging.getLogger("streamrec.service")


@dataclass
class Side:
    """One full copy of the served state at ``version``."""

    version: int | None = None
    manifest: BundleManifest | None = None
    model: ModelConfig | None = None
    tables: dict[str, list[SparseTable]] = field(default_factory=dict)
    dense: dict[str, np.ndarray] = field(default_factory=dict)
    items: ItemIndex | None = None
    predictor: Predictor | None = None
    records: RecordHasher | None = None  # hashes raw field values; None when the bundle has no schema
    popular: PopularItems | None = None  # what a user the model knows nothing of is recommended
    item_counts: ItemCounts | None = None  # the bundle's decayed item counts (service.popularity_prior)
    readers: int = 0
    healthy: bool = True
    chain: list[int] = field(default_factory=list)  # the bundles applied since (and with) its base, oldest first

    def table_of(self, slot: str) -> tuple[str, list[SparseTable]]:
        """The table serving ``slot`` (a slot name of the model, or a table name)."""
        name = slot
        if slot not in self.tables and self.model is not None:
            spec = next((s for s in self.model.slots if s.name == slot), None)
            if spec is not None:
                name = self.model.table_name(spec)
        shards = self.tables.get(name)
        if shards is None:
            slots = [s.name for s in self.model.slots] if self.model else []
            raise NotFound(f"unknown slot {slot!r}", detail={"slot": slot, "slots": slots,
                                                              "tables": sorted(self.tables)})
        return name, shards

    def model_rows(self, table: str, keys: np.ndarray) -> np.ndarray:
        """The Predictor's lookup: rows of ``keys`` in ``table``; unknown ids read as their
        initializer row, exactly what the trainer's own pulls see."""
        shards = self.tables.get(table)
        if shards is None:
            raise NotFound(f"bundle {self.version} has no table {table!r}", detail={"table": table})
        if len(shards) == 1:
            return shards[0].pull(keys)
        out = np.empty((keys.shape[0], shards[0].width), np.float32)
        where = shard_of(keys, len(shards))
        for i, t in enumerate(shards):
            sel = np.flatnonzero(where == i)
            if sel.shape[0]:
                out[sel] = t.pull(keys[sel])
        return out

    def lookup(self, slot: str, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(found mask, rows of the found ids in input order). Absent ids get no row."""
        return existing_rows(self.table_of(slot)[1], ids)


def existing_rows(shards: list[SparseTable], ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(found mask, rows of the found ids in input order) of one table's ``shards``."""
    ids = np.ascontiguousarray(ids, dtype=np.uint64)
    if len(shards) == 1 or ids.shape[0] == 1:  # one id: its shard in plain ints, no plan (the hot single lookup)
        table = shards[0] if len(shards) == 1 else shards[shard_of_key(int(ids[0]), len(shards))]
        rows, found = table.pull_existing(ids)
        return found, rows[found]
    # one numba pass dedupes and groups the ids by shard
    plan = plan_keys(ids, len(shards))
    m = plan.keys.shape[0]
    found = np.zeros(m, np.bool_)
    rows = np.empty((m, shards[0].width), np.float32)
    for i, table in enumerate(shards):
        sl = plan.shard_slice(i)
        if sl.stop > sl.start:
            rows[sl], found[sl] = table.pull_existing(plan.keys[sl])
    found_in = found[plan.inverse]
    return found_in, rows[plan.inverse[found_in]]


def _model_of(man: BundleManifest) -> ModelConfig:
    try:
        return ModelConfig.model_validate(man.model)
    except ValidationError as exc:
        raise CorruptData(f"bundle {man.version}: model config unreadable: {exc.errors()[:3]}",
                          detail={"version": man.version}) from None


def _records_of(man: BundleManifest) -> RecordHasher | None:
    try:
        return record_hasher(man.schema)
    except ValidationError as exc:
        raise CorruptData(f"bundle {man.version}: record schema unreadable: {exc.errors()[:3]}",
                          detail={"version": man.version}) from None


class LiveOverlay(Protocol):
    """What the store asks of the service's live rows (service.read_through.ReadThrough)."""

    def overlaid(self, table: str, ids: np.ndarray, rows: np.ndarray) -> np.ndarray: ...


class ModelStore:
    def __init__(self, root: Path, index_settings: IndexSettings) -> None:
        self.root = Path(root)
        self.index_settings = index_settings
        self._active: Side | None = None
        self._standby: Side | None = None
        self._count_lock = threading.Lock()
        self._apply_lock = threading.Lock()  # one bundle (or index rebuild) at a time
        self.history: list[dict[str, Any]] = []  # applied bundles, newest last
        self.last_error: dict[str, Any] | None = None
        self.rejected: dict[int, dict[str, Any]] = {}
        self.live_rows: LiveOverlay | None = None  # set by the app when it follows the shards (read-through)
        self.applying: int | None = None  # the bundle being applied
        self.vanished = 0  # bundles deleted between their listing and their load (module docstring)

    def _model_rows(self, side: Side, table: str, keys: np.ndarray) -> np.ndarray:
        """The Predictor's lookup: the side's rows, overlaid with the live rows when the service
        follows the shards (``live_rows``), so recommend and predict see a trained row within the
        live path's delay, not the next bundle's."""
        rows = side.model_rows(table, keys)
        return rows if self.live_rows is None else self.live_rows.overlaid(table, keys, rows)

    # ----------------------------------------------------------------- reads
    @property
    def version(self) -> int | None:
        side = self._active
        return side.version if side else None

    @property
    def ready(self) -> bool:
        return self._active is not None

    @contextlib.contextmanager
    def read(self) -> Iterator[Side]:
        """Pin the active side for one request (it will not change under the reader)."""
        with self._count_lock:
            side = self._active
            if side is None:
                raise Unavailable("no bundle loaded yet", detail={"exports_dir": str(self.root)})
            side.readers += 1
        try:
            yield side
        finally:
            with self._count_lock:
                side.readers -= 1

    def _drain(self, side: Side) -> None:
        while True:
            with self._count_lock:
                if side.readers == 0:
                    return
            time.sleep(0.0005)

    # ---------------------------------------------------------------- writes
    def apply(self, version: int) -> dict[str, Any]:
        """Apply bundle ``version`` (the next base, or the delta whose parent is being served)."""
        with self._apply_lock:
            self.applying = version
            try:
                return self._apply(version)
            except Exception as exc:
                if not (bundle_dir(self.root, version) / MANIFEST).exists():
                    self.vanished += 1
                    raise NotFound(f"bundle {version} was deleted before it loaded (bundle retention); "
                                   "the next poll starts from the newest base", detail={"version": version}) from exc
                err = exc if isinstance(exc, StreamrecError) else None
                if err is None:  # a loader bug: reject this bundle once, keep serving the old one
                    log.exception("bundle %d failed to load", version)
                    err = CorruptData(f"bundle {version} failed to load: {type(exc).__name__}: {exc}")
                self.last_error = {"version": version, "at": time.time(), **err.to_dict()}
                self.rejected[version] = self.last_error
                if err is exc:
                    raise
                raise err from exc
            finally:
                self.applying = None

    def pinned(self) -> list[int]:
        """The bundles this store still needs on disk: the served chain (a standby rebuilt replays
        it) and the bundle being applied."""
        side = self._active
        chain = list(side.chain) if side is not None else []
        applying = self.applying
        return chain if applying is None else [*chain, applying]

    def _apply(self, version: int) -> dict[str, Any]:
        t0 = time.time()
        man = read_manifest(self.root, version)
        active = self._active
        if man.kind == "delta":
            if active is None or active.version != man.parent_version:
                raise Conflict(f"bundle {version} is a delta of {man.parent_version} but the service holds "
                               f"{active.version if active else 'nothing'}; a base must come first",
                               detail={"version": version, "parent_version": man.parent_version})
            if man.num_shards != active.manifest.num_shards or set(man.tables) != set(active.tables):
                raise Conflict(f"bundle {version}: shards/tables differ from its parent {man.parent_version}")
        model = _model_of(man)
        configs = {c.name: c for c in model.table_configs()}
        unknown = sorted(set(man.tables) - set(configs))
        if unknown:
            raise CorruptData(f"bundle {version}: tables {unknown} are not in its model config {sorted(configs)}")
        dense = load_dense(self.root, man)
        items = load_items(self.root, man)
        next_items = self._next_items(active, man, items)
        standby = self._ready_standby(active, base=man.kind == "base")
        self._load_tables(standby, man, model, dense, next_items)
        standby.popular = popular_items(standby)  # once per bundle: the other side takes the same
        standby.item_counts = item_counts(self.root, man)
        with self._count_lock:
            self._active, self._standby = standby, active
        now = time.time()
        record = {"version": version, "kind": man.kind, "pass_id": man.pass_id, "applied_at": now,
                  "apply_seconds": round(now - t0, 4), "items": next_items.size if next_items else 0,
                  "freshness_s": None if man.newest_record_time is None else round(now - man.newest_record_time, 3)}
        self.history = [*self.history[-99:], record]
        log.info("bundle %d (%s of pass %s) serving after %.2f s: %d items, freshness %s s", version, man.kind,
                 man.pass_id, record["apply_seconds"], record["items"], record["freshness_s"], extra={"fields": record})
        # the other side takes the same bundle: once its readers drained, or, for the very first
        # bundle, as a fresh side (while the first one already serves)
        other = active or Side()
        self._drain(other)
        try:
            self._load_tables(other, man, model, dense, next_items)
            other.popular, other.item_counts = standby.popular, standby.item_counts
        except Exception:  # e.g. the bundle deleted meanwhile: the active side serves it already
            other.healthy = False  # replayed before the next bundle
        self._standby = other
        return record

    def _next_items(self, active: Side | None, man: BundleManifest, items: Any) -> ItemIndex | None:
        current = active.items if active else None
        if items is None:
            return current if man.kind == "delta" else None
        ids, vectors = items
        if man.items_full or current is None:
            return ItemIndex.build(self.index_settings, ids, vectors)
        return current.upserted(ids, vectors)

    def _load_tables(self, side: Side, man: BundleManifest, model: ModelConfig, dense: dict[str, np.ndarray],
                     items: ItemIndex | None) -> None:
        # CorruptData when dense does not fit
        predictor = Predictor(man.model, dense, lambda t, k: self._model_rows(side, t, k))
        records = _records_of(man)
        side.healthy = False  # until every table took the bundle
        if man.kind == "base":
            side.tables = {}  # free the old rows before loading the new ones
            configs = {c.name: c for c in model.table_configs()}
            side.tables = {name: [SparseTable(configs[name]) for _ in range(man.num_shards)] for name in man.tables}
        for name, shards in side.tables.items():
            for i, table in enumerate(shards):
                table.load(man.table_dir(self.root, i, name))
        side.version, side.manifest, side.model, side.dense, side.items = man.version, man, model, dense, items
        side.predictor, side.records = predictor, records
        side.chain = [man.version] if man.kind == "base" else [*side.chain, man.version]
        side.healthy = True

    def _ready_standby(self, active: Side | None, *, base: bool = False) -> Side:
        """The standby side, holding the active version before a delta is applied to it (``base``:
        a base follows, which replaces every table, so no rebuild)."""
        standby = self._standby or Side()
        if active is None or base or (standby.healthy and standby.version == active.version):
            return standby
        # the standby missed a bundle (it failed there): rebuild it from the active version's chain
        chain = []
        v: int | None = active.version
        while v is not None:
            man = read_manifest(self.root, v)
            chain.append(man)
            v = man.parent_version if man.kind == "delta" else None
        for man in reversed(chain):
            self._load_tables(standby, man, _model_of(man), active.dense, active.items)
        standby.popular, standby.item_counts = active.popular, active.item_counts
        self._standby = standby
        return standby

    def rebuild_index_if_due(self) -> bool:
        """Retrain the IVF index off to the side when enough items changed, then swap it in."""
        side = self._active
        if side is None or side.items is None or not side.items.needs_rebuild():
            return False
        with self._apply_lock:
            side = self._active
            if side is None or side.items is None or not side.items.needs_rebuild():
                return False
            fresh = side.items.rebuilt()
            for s in (self._active, self._standby):
                if s is not None and s.version == side.version:
                    s.items = fresh
        return True

    def upsert_items_live(self, version: int, ids: np.ndarray, vectors: np.ndarray) -> int | None:
        """The live path's item batch, on the served item index of bundle ``version``; returns
        how many items were new, None (nothing changed) when another bundle is served.

        The sides take turns as for a bundle: the standby's index is changed in place once its
        readers drained, the sides swap, and the old active side's index takes the same batch
        once its readers drained. So a batch costs two in-place updates, not a copy of the index;
        a copy is made once per bundle or rebuild, when both sides still share one index."""
        with self._apply_lock:
            active, standby = self._active, self._standby
            if active is None or active.version != version or active.items is None:
                return None
            if standby is None or not standby.healthy or standby.version != version or standby.items is None:
                old = active.items
                active.items, added = old.live_upserted(ids, vectors)  # no twin: a new snapshot
                if standby is not None and standby.items is old:
                    standby.items = active.items
                return added
            self._drain(standby)
            if standby.items is active.items:  # a bundle or a rebuild gave both sides one index
                standby.items = active.items.copy()
            standby.items, added = standby.items.upsert_in_place(ids, vectors)
            with self._count_lock:
                self._active, self._standby = standby, active
            self._drain(active)
            active.items, _ = active.items.upsert_in_place(ids, vectors)
            return added

    def status(self) -> dict[str, Any]:
        side = self._active
        man = side.manifest if side else None
        return {
            "version": side.version if side else None,
            "kind": man.kind if man else None,
            "pass_id": man.pass_id if man else None,
            "tables": {n: sum(t.size() for t in s) for n, s in side.tables.items()} if side else {},
            "num_shards": man.num_shards if man else None,
            "items": side.items.size if side and side.items else 0,
            "index_kind": side.items.kind if side and side.items else None,
            "freshness_s": self.history[-1]["freshness_s"] if self.history else None,
            "standby_version": self._standby.version if self._standby and self._standby.healthy else None,
            "last_error": self.last_error,
            "history": self.history[-10:],
        }
