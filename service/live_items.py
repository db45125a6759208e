"""The live path for items: vectors of items that training changed since the served bundle,
refreshed in the Faiss index in small batches by one thread, without waiting for a pass.

Every ``items_interval_s`` the thread reads each shard's changed-keys log of the item tower's
table after its cursor (``PSClient.changes``, :mod:`ps.shard_changes`), keeps the ids of the
item slot, pulls their live rows (existing-only), computes their vectors with the served
bundle's item tower (its own copy of the model: the request threads' copy keeps its
activations) and writes that batch into the index (:meth:`ModelStore.upsert_items_live`: the
store's two sides take turns, each index changed in place while the other serves). New items
enter the index the same way.

A served state is a bundle version plus how far the live updates reached (``status()``: the
version, each shard's log cursor, the receipt time of the newest change applied). When a new
bundle is served, the items refreshed live since the previous one are refreshed again on top
of it (the bundle's vectors are from its pass, the live rows are newer). When a shard's log
starts a new generation (its tables were loaded from a save: a rollback, a restart), the live
path stops, read-through included, until a bundle newer than the served one is served: the
rolled-back model's own export.

An item tower with more slots than the item id (category, tags) reads each item's ids in them
from the job's item catalogue in the PS (``ids.items``, exports.item_catalog), as the exporter
does; an item whose catalogue row is not written yet (the trainer writes it after the step
that pushed the item's row) is tried again on the next polls, for ``CATALOGUE_WAIT_S``. A
tower without the item id slot cannot tell a changed item from its rows: it keeps bundle-only
item vectors (``status()`` says why) and the thread only watches the logs' generations (to
stop read-through on a rollback).
Limits: items evicted on the shards stay in the index until the next bundle; a change of a row
shared by many items (a category's) reaches them with the next bundle. Freshness here runs from the receipt
of the records that changed an item's row (their Kafka time, carried by the trainer's push into the
shard's log; the push time when a pusher sends none) to its vector in the index.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from core.errors import NotFound, StreamrecError
from core.lag_window import LagWindow
from exports.item_catalog import CATALOG_TABLE, ItemCatalog
from logrecords.batch import Batch
from models import build_model
from models.features import build_features
from ps.client import PSClient
from ps.ps_config import ClientConfig
from service.model_store import ModelStore, Side
from service.read_through import ReadThrough
from service.settings import ReadThroughSettings

log = logging.getLogger("streamrec.service")

# Each write waits for both sides' readers to drain in turn and costs the batch twice: changes
# read in between wait for the next write, so a write covers several polls (items' target: 2 s).
SWAP_EVERY_S = 0.25
FRESHNESS_SAMPLES = 4096  # recent items whose receipt -> index lag the quantiles cover
CATALOGUE_WAIT_S = 5.0  # how long an item is tried again for its catalogue row (by time: polls come faster or slower)


class _Tower:
    """The served bundle's item tower; its item-slot features from the PS catalogue when it
    reads more slots than the item id."""

    def __init__(self, side: Side) -> None:
        assert side.manifest is not None and side.model is not None
        self.version = side.version
        self.model = build_model(side.manifest.model)
        self.model.params.load(side.dense)
        self.unsupported: str | None = None
        self.table = sorted(side.tables)[0] if side.tables else ""  # watched for its generation only
        self.slot = ""
        self.slot_id = -1  # the shards send no keys, only where their logs stand
        slots = getattr(self.model, "item_slots", ())
        schema = side.records.schema if side.records is not None else None
        if not slots:
            self.unsupported = "the model has no item tower"
        elif schema is None or schema.item_id is None:
            self.unsupported = "the bundle carries no schema naming the item field"
        elif schema.item_id not in [s.name for s in slots]:
            self.unsupported = (f"the item tower reads slots {[s.name for s in slots]}, not the item id "
                                f"{schema.item_id!r}: a changed item cannot be told from its rows")
        else:
            spec = next(s for s in slots if s.name == schema.item_id)
            self.slot = spec.name
            self.slot_id = int(schema.slot_ids()[self.slot])
            self.table = side.model.table_name(spec)
        # more item slots than the id: each item's ids in them come from the job's catalogue in the PS
        self.catalog = ItemCatalog(tuple(s.name for s in slots)) if len(slots) > 1 else None

    def computed(self, client: PSClient, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(ids computed, their vectors, ids to try again: not in the catalogue yet). Rows come
        from the live shards; an item whose id row is not there is left out."""
        if self.catalog is None:
            rows, found = client.wait(client.pull_existing(self.table, ids))
            return ids[found], self._from_id_rows(client, ids[found], rows[found]), ids[:0]
        try:
            cat = client.wait(client.read_id_rows(CATALOG_TABLE, ids, words=self.catalog.words))
        except NotFound:  # no item written to a shard yet: its catalogue table does not exist
            return ids[:0], np.empty((0, 0), np.float32), ids
        done = ids[cat.found]
        vectors = self.catalog.item_vectors(self.model, client, done, cat.rows[cat.found])  # as the exporter does
        return done, vectors, ids[~cat.found]

    def _from_id_rows(self, client: PSClient, ids: np.ndarray, rows: np.ndarray) -> np.ndarray:
        n = ids.shape[0]
        batch = Batch(labels=np.zeros(n, np.float32), dense=np.zeros((n, 0), np.float32),
                      slots={self.slot: (ids, np.arange(n + 1, dtype=np.int64))}, item_id=ids)
        f = build_features(self.model.config, batch, self.model.item_slots)
        order = np.argsort(ids)
        tables = {}
        for t, ti in f.tables.items():  # the tower's keys of the item slot: our ids, in its own order
            if t == self.table:
                tables[t] = rows[order[np.searchsorted(ids, ti.keys, sorter=order)]]
            else:  # the item biases' table (retrieval.item_bias): the same ids' rows there
                tables[t] = client.wait(client.pull_existing(t, ti.keys)).rows
        return np.ascontiguousarray(self.model.item_vectors(f, tables), np.float32)


class LiveItems:
    """The item refresh thread; ``status()`` and ``freshness()`` tell where it stands."""

    def __init__(self, settings: ReadThroughSettings, store: ModelStore, read_through: ReadThrough | None) -> None:
        secret = Path(settings.secret_file).read_bytes().strip() if settings.secret_file else None
        # its own client (clients are not thread-safe), not reporting restarts: generations do
        self._client = PSClient(list(settings.endpoints), secret=secret, report_restarts=False,
                                config=ClientConfig(timeout_s=max(1.0, settings.timeout_s), retries=0))
        self.settings = settings
        self.store = store
        self.read_through = read_through
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="live-items", daemon=True)
        self._tower: _Tower | None = None
        self._tower_changed = False  # a new bundle since the last poll
        self._cursors: list[tuple[int, int]] | None = None
        self._since_bundle: set[int] = set()  # items refreshed live since the served bundle
        self._retry: dict[int, float] = {}  # items to do next poll (bundle swap, catalogue): id -> receipt time
        self._waiting: dict[int, float] = {}  # items not in the catalogue yet: when they were first tried
        self._lags = LagWindow(FRESHNESS_SAMPLES)
        self._held: list[tuple[np.ndarray, np.ndarray]] = []  # changes read since the last swap (keys, times)
        self._swapped_at = -SWAP_EVERY_S  # monotonic time of the last live swap
        self.paused_at: int | None = None  # the bundle version served when a shard's log restarted
        self.reached: float | None = None  # receipt time of the newest change applied
        self.items_refreshed = 0
        self.items_added = 0
        self.batches = 0
        self.lost = 0  # reads whose cursor had fallen out of a shard's ring
        self.errors = 0

    def start(self) -> LiveItems:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)
        self._client.close()

    def _run(self) -> None:
        while not self._stop.wait(self.settings.items_interval_s):
            for step in (self.poll_once, self.poll_rows):
                try:
                    step()
                except StreamrecError as err:  # shards busy or gone: try again next time
                    self.errors += 1
                    log.debug("live path: %s", err.message)
                except Exception:
                    self.errors += 1
                    log.exception("live refresh failed")

    def poll_rows(self) -> int:
        """Bring the read-through's overlay of changed rows (service.live_rows) up to the shards'
        logs once; returns the rows upserted."""
        if self.read_through is None or self.paused_at is not None:
            return 0
        with self.store.read() as side:
            if side.version is None or side.manifest is None:
                return 0
            version, newest, tables = side.version, side.manifest.newest_record_time, sorted(side.tables)
        overlay = self.read_through.overlay
        overlay.bundle_served(version, newest)
        return overlay.poll(self._client, tables, limit=self.settings.changes_limit)

    # ------------------------------------------------------------------ one poll
    def poll_once(self) -> int:
        """Read the changes once and apply them; returns the items refreshed."""
        version = self.store.version
        if version is None:
            return 0
        if self.paused_at is not None:
            if version <= self.paused_at:
                return 0
            self._resume()
        tower = self._tower_for(version)
        if tower is None or not tower.table:
            return 0
        # the cursors are set only once a read has answered: a shard's change log records nothing
        # until its first read, so "cursors" in status() means every shard is recording now
        cursors = self._cursors if self._cursors is not None else [(0, 0)] * self._client.n_shards
        # only the item slot's keys travel; without item refresh only the logs' generations
        changes = self._client.wait(self._client.changes(tower.table, cursors, slot=tower.slot_id,
                                                         limit=self.settings.changes_limit))
        restarted = [c.reset and cursors[i][0] not in (0, c.generation) for i, c in enumerate(changes)]
        if any(restarted):
            self._pause(version)
            return 0
        self.lost += sum(c.reset and cursors[i][0] != 0 for i, c in enumerate(changes))
        self._cursors = [(c.generation, c.seq) for c in changes]
        if tower.unsupported:
            return 0
        keys = np.concatenate([c.keys for c in changes]) if changes else np.empty(0, np.uint64)
        times = np.concatenate([c.times for c in changes]) if changes else np.empty(0)
        redo = np.fromiter(self._since_bundle, np.uint64, len(self._since_bundle)) if self._tower_changed else None
        self._tower_changed = False
        done = 0
        if redo is not None and redo.size:  # a new bundle: the live vectors go on top of it again
            self._since_bundle = set()
            done += self._refresh(tower, redo, np.full(redo.shape[0], np.nan))
        if self._retry:
            keys = np.concatenate([keys, np.fromiter(self._retry, np.uint64, len(self._retry))])
            times = np.concatenate([times, np.fromiter(self._retry.values(), np.float64, len(self._retry))])
            self._retry = {}
        if keys.size:
            self._held.append((keys, times))
        if self._held and time.monotonic() - self._swapped_at >= SWAP_EVERY_S:
            keys = np.concatenate([k for k, _ in self._held])
            times = np.concatenate([t for _, t in self._held])
            self._held = []
            order = np.argsort(times, kind="stable")  # NaN (no time) last
            keys, times = keys[order], times[order]
            ids, first = np.unique(keys, return_index=True)  # the oldest change of each item
            done += self._refresh(tower, ids, times[first])
        return done

    def _tower_for(self, version: int) -> _Tower | None:
        if self._tower is not None and self._tower.version == version:
            return self._tower
        with self.store.read() as side:
            self._tower = _Tower(side) if side.manifest is not None else None
        self._tower_changed = True
        return self._tower

    def _refresh(self, tower: _Tower, ids: np.ndarray, pushed: np.ndarray) -> int:
        done = 0
        step = self.settings.items_batch
        for start in range(0, ids.shape[0], step):
            if self._stop.is_set():
                break
            try:
                done += self._refresh_batch(tower, ids[start : start + step], pushed[start : start + step])
            except Exception:
                # the logs' cursors have moved past these items: a pull that timed out on a busy shard
                # must not lose them, so this batch and the rest are tried again at the next poll
                self._retry.update(zip(ids[start:].tolist(), pushed[start:].tolist(), strict=True))
                raise
        return done

    def _refresh_batch(self, tower: _Tower, ids: np.ndarray, pushed: np.ndarray) -> int:
        done, vectors, later = tower.computed(self._client, ids)
        if later.size:  # the trainer writes an item's catalogue row after the step that pushed it
            when = dict(zip(ids.tolist(), pushed.tolist(), strict=True))
            now = time.monotonic()
            for i in later.tolist():
                if now - self._waiting.setdefault(i, now) <= CATALOGUE_WAIT_S:
                    self._retry[i] = when[i]
                else:  # never catalogued: it comes with the next bundle
                    self._waiting.pop(i, None)
        pushed = pushed[np.isin(ids, done)]  # done keeps the order of ids
        ids = done
        for i in ids.tolist():
            self._waiting.pop(i, None)
        if not ids.size:
            return 0
        added = self.store.upsert_items_live(tower.version, ids, vectors)
        if added is None:  # a new bundle: the next poll does these on top of it
            self._retry.update(zip(ids.tolist(), pushed.tolist(), strict=True))
            return 0
        self._swapped_at = time.monotonic()
        now = time.time()
        self._since_bundle.update(ids.tolist())
        stamped = pushed[np.isfinite(pushed)]
        self._lags.add((now - stamped).tolist())
        if stamped.size:
            self.reached = max(self.reached or 0.0, float(stamped.max()))
        self.items_refreshed += int(ids.shape[0])
        self.items_added += added
        self.batches += 1
        return int(ids.shape[0])

    def _pause(self, version: int) -> None:
        log.warning("live path stopped: a shard's tables were loaded from a save (rollback or restart); "
                    "serving bundle %d until a newer bundle arrives", version)
        self.paused_at = version
        self._cursors = None
        self._since_bundle = set()
        self._held = []
        if self.read_through is not None:
            self.read_through.paused = True
            self.read_through.overlay.clear()

    def _resume(self) -> None:
        log.info("live path resumed on bundle %s", self.store.version)
        self.paused_at = None
        if self.read_through is not None:
            self.read_through.paused = False

    # ---------------------------------------------------------------- reports
    def freshness(self, q: float) -> float | None:
        """Quantile ``q`` (0..1) of receipt -> index seconds over the recent refreshed items."""
        return self._lags.quantile(q)

    def status(self) -> dict[str, Any]:
        tower = self._tower
        return {
            "state": "stopped (shard log restarted: rollback or restart)" if self.paused_at is not None else "live",
            "paused_at_version": self.paused_at,
            "bundle_version": tower.version if tower else None,
            "items": "off: " + tower.unsupported if tower and tower.unsupported else ("on" if tower else None),
            "table": tower.table if tower else None,
            "cursors": [list(c) for c in self._cursors] if self._cursors else None,
            "reached": self.reached,
            "reached_age_s": None if self.reached is None else round(time.time() - self.reached, 3),
            "items_refreshed": self.items_refreshed, "items_added": self.items_added, "batches": self.batches,
            "lost_reads": self.lost, "errors": self.errors,
            "item_freshness_p50_s": _round(self.freshness(0.5)), "item_freshness_p95_s": _round(self.freshness(0.95)),
            "rows": None if self.read_through is None else {
                **self.read_through.overlay.status(), "lookups_from_memory": self.read_through.from_overlay,
                "lookups_read_through": self.read_through.served},
        }


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 4)
