"""After each committed pass: an inference bundle in ``<exports>/<version>/`` (exports.bundle).

Every shard saves its tables on cursor "export" straight into the staging dir: a delta
(rows touched since the previous bundle, plus tombstones of evicted ids) or, every K
exports and whenever a shard has no export base since it started or loaded, a base. If
the shards disagree (one fell back to a base) the save is redone as a base everywhere, so a
bundle is one kind. Then the dense weights, the two-tower item vectors and the manifest (with
the job's record schema, so the service can hash raw field values as ingestion does). The item
vectors are those of the job's catalogue as the shards just saved it (exports.item_catalog):
every item any worker saw in a base, the items written since the previous bundle in a delta.
A two_tower bundle also carries the job's decayed item counts, the sum of those in the workers'
parts of the pass (models.item_popularity), for the service's popularity prior, and the prior's
weight chosen by replaying the service's re-rank of earlier bundles on the chief's latest records
(trainer.prior_weight) against a bundle's whole item set, which the exporter keeps (a base's items
replace it, a delta's are upserted).

The export runs in a background thread with its own PS client and model copy, after the
pass is committed and the workers were released: it does not stall training. The next
commit waits for it (a shard runs one save at a time).

After each export, failed or not, the oldest bundles go (exports.retention): the newest
``passes.keep_bundles`` stay with the chains they and the services still need. A bundle that
fails for want of disk space is counted (trainer.disk_space) like any failed bundle: the
next pass exports again, a base.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import numpy as np

from core.errors import StreamrecError
from exports.bundle import (
    clear_stage,
    discard_staging,
    list_versions,
    publish,
    shard_save_template,
    stage_shard_dirs,
)
from exports.item_catalog import ItemCatalog
from exports.retention import retain
from logrecords.schema_config import SchemaConfig
from models import build_model
from models.item_popularity import Counts
from models.model_config import ModelConfig
from ps.admin import SaveMode
from ps.client import PSClient
from stores.store import open_store
from trainer.disk_space import DiskState, is_disk_full
from trainer.prior_weight import PriorWeigher, Remembered, history_slot_of

SAVE_TIMEOUT_S = 120.0
log = logging.getLogger(__name__)


class Exporter:
    def __init__(self, root: str, client: PSClient, model_config: ModelConfig, *, base_every: int,
                 schema: SchemaConfig | None = None, keep: int | None = None, disk: DiskState | None = None) -> None:
        """``keep``: bundles kept after each export (None: all); ``disk``: where failed writes are counted."""
        self.root = open_store(root)  # a path or a URL (s3://...): stores.store
        discard_staging(self.root)
        self.client = client  # owned by the export thread
        self.model = build_model(model_config)  # a copy: the training thread keeps its own
        self.base_every = base_every
        self.schema = None if schema is None else schema.model_dump(mode="json")
        slot = history_slot_of(schema, model_config)  # where a record holds its user's history
        # the prior's weight, chosen on the users' picks after each bundle (trainer.prior_weight)
        self.weigher = None if slot is None or schema is None or schema.history is None else PriorWeigher(
            slot, schema.history.length)
        self.items: tuple[np.ndarray, np.ndarray] | None = None  # the newest bundle's whole item set, ids sorted
        versions = list_versions(self.root)
        self.last_version = versions[-1] if versions else 0
        self.exports = 0  # by this process: its first bundle is a base (the chain restarts with it)
        self._thread: threading.Thread | None = None
        self._result: dict[str, Any] | None = None
        self.failures = 0
        self.keep = keep
        self.disk = disk if disk is not None else DiskState()
        self.retired = 0  # bundles deleted by retention
        self.retention_failures = 0

    def start(self, pass_id: int, *, dense: dict[str, np.ndarray], newest_record_time: float | None,
              catalog: ItemCatalog | None = None, config: ModelConfig | None = None,
              popularity: Counts | None = None, recent: Remembered | None = None) -> None:
        """Export in the background (after waiting for the previous export); ``config``: the
        trained model's, whose dense transforms carry its running statistics (else this exporter's);
        ``popularity``: the job's decayed item counts (models.item_popularity); ``recent``: the
        chief's latest records the prior's weight is chosen on (trainer.prior_weight)."""
        self.wait()
        self._result = None
        self._thread = threading.Thread(target=self._run, args=(pass_id, dense, newest_record_time, catalog, config,
                                                                popularity, recent),
                                        name="export", daemon=True)
        self._thread.start()

    def _run(self, *args: Any) -> None:
        try:
            t0 = time.monotonic()
            self._result = self.export(*args)
            self._result["export_s"] = round(time.monotonic() - t0, 4)
            self.disk.ok("bundle")
            r = self._result
            chosen = ("" if r["popularity_weight"] is None else f", prior weight {r['popularity_weight']:g} (chosen "
                      f"in {r['popularity_weight_s']:.3f} s of the export's {r['export_s']:.3f} s)")
            log.info("bundle %d (%s) of pass %d exported: %d items%s", r["version"], r["kind"], args[0], r["items"],
                     chosen, extra={"fields": r})
        except (StreamrecError, OSError) as err:  # a failed bundle is counted; the next one is a base
            self.failures += 1
            self.exports = 0
            if is_disk_full(err):
                self.disk.failed("bundle", err)
            else:
                log.warning("bundle of pass %s failed: %s", args[0], getattr(err, "message", None) or err)
            try:
                discard_staging(self.root)
            except OSError as exc:
                log.warning("cannot discard the failed bundle's staging dir: %s", exc)
            self._result = {"error": getattr(err, "message", None) or f"{type(err).__name__}: {err}", "pass": args[0]}
        self.prune()

    def prune(self) -> list[int]:
        """Retention (exports.retention); a failure is counted and logged, the next export tries again."""
        if self.keep is None:
            return []
        try:
            gone = retain(self.root, self.keep)
        except (StreamrecError, OSError) as err:
            self.retention_failures += 1
            log.warning("bundle retention failed (tried again after the next export): %s", err)
            return []
        self.retired += len(gone)
        return gone

    def wait(self) -> dict[str, Any] | None:
        """The last export's result ({"error": ...} when it failed); None when none ran."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        result, self._result = self._result, None
        return result

    def export(self, pass_id: int, dense: dict[str, np.ndarray], newest_record_time: float | None,
               catalog: ItemCatalog | None = None, config: ModelConfig | None = None,
               popularity: Counts | None = None, recent: Remembered | None = None) -> dict[str, Any]:
        if config is not None:  # the dense transforms the model trained with (models.dense_statistics)
            self.model.config = self.model.config.model_copy(update={"dense_transforms": config.dense_transforms})
        version = self.last_version + 1
        base = self.exports == 0 or self.exports % self.base_every == 0
        entries = self._save(version, "base" if base else "delta")
        if not base and any(e["mode"] == "base" for e in entries):
            base = True  # a shard restarted: everyone writes a base
            entries = self._save(version, "base")
        self.model.params.load(dense)
        items = None
        if catalog is not None:  # the job's catalogue as the shards saved it: all items, or those written since
            ids, rows = catalog.read_saved_items(self.root, stage_shard_dirs(self.root, version, self.client.n_shards))
            items = (ids, catalog.item_vectors(self.model, self.client, ids, rows))
            self.items = _item_set(self.items if not base else None, items)
        t0 = time.monotonic()
        choice = None
        if popularity is not None and recent is not None and self.weigher is not None and self.items is not None:
            choice = self.weigher.weigh(self.model, self.client, recent, self.items, popularity, seed=pass_id)
        choose_s = time.monotonic() - t0
        man = publish(self.root, version=version, kind="base" if base else "delta",
                      parent_version=None if base else self.last_version, pass_id=pass_id,
                      num_shards=self.client.n_shards, tables=[t.name for t in self.model.tables],
                      model=self.model.config.model_dump(mode="json"), dense=dense,
                      items=items, items_full=base, newest_record_time=newest_record_time,
                      schema=self.schema, popularity=popularity,
                      popularity_weight=None if choice is None else choice.manifest())
        self.last_version = version
        self.exports += 1
        return {"version": version, "kind": man.kind, "pass": pass_id, "items": 0 if items is None else len(items[0]),
                "popularity_weight": None if choice is None else choice.weight,
                "popularity_weight_s": round(choose_s, 4)}

    def _save(self, version: int, mode: str) -> list[dict[str, Any]]:
        clear_stage(self.root, version)
        # bounded: a shard lost mid-save fails this bundle instead of holding the next commit
        return self.client.admin.save(into=shard_save_template(self.root, version), mode=SaveMode(mode),
                                      cursor="export", timeout_s=SAVE_TIMEOUT_S)

    def close(self) -> None:
        self.wait()
        self.client.close()

    def abandon(self) -> None:
        """A shard was lost: the running export fails alone (it may hang until its timeout), its
        client closed once it ended; a fresh exporter goes on."""
        close_when_done(self._thread, self.client)


def _item_set(current: tuple[np.ndarray, np.ndarray] | None,
              new: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """``current`` (ids sorted, vectors) with ``new``'s items upserted (None: ``new`` alone), ids sorted."""
    ids, vectors = np.asarray(new[0], np.uint64), np.asarray(new[1], np.float32)
    if current is not None and current[0].shape[0]:
        old = ~np.isin(current[0], ids)
        ids, vectors = np.concatenate([current[0][old], ids]), np.concatenate([current[1][old], vectors])
    order = np.argsort(ids, kind="stable")
    return ids[order], vectors[order]


def close_when_done(thread: threading.Thread | None, client: PSClient) -> None:
    """Close ``client`` once ``thread``, its only user, ended: at once when none runs, else from a
    thread waiting for it (a client left to the garbage collector may hang in zmq's term())."""
    if thread is None or not thread.is_alive():
        client.close()
        return

    def close() -> None:
        thread.join()
        client.close()

    threading.Thread(target=close, name="close-abandoned-client", daemon=True).start()
