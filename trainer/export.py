"""After each committed pass: an inference bundle in ``<exports>/<version>/`` (trainer.bundle).

Every shard saves its tables on cursor "export" straight into the staging dir: a delta
(rows touched since the previous bundle, plus tombstones of evicted ids) or, every K
exports and whenever a shard has no export base since it started or loaded, a base. If
the shards disagree (one fell back to a base) the save is redone as a base everywhere, so a
bundle is one kind. Then the dense weights, the two-tower item vectors and the manifest.
"""

from __future__ import annotations

import shutil
from typing import Any

import numpy as np

from tables.client import PSClient
from trainer.bundle import discard_staging, list_versions, publish, staging_dir
from trainer.item_catalog import ItemCatalog
from trainer.models.base import Model


class Exporter:
    def __init__(self, root: str, client: PSClient, model: Model, *, base_every: int,
                 catalog: ItemCatalog | None = None) -> None:
        from pathlib import Path

        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        discard_staging(self.root)
        self.client = client
        self.model = model
        self.base_every = base_every
        self.catalog = catalog
        versions = list_versions(self.root)
        self.last_version = versions[-1] if versions else 0
        self.exports = 0  # by this process: its first bundle is a base (the chain restarts with it)

    def export(self, pass_id: int, *, newest_record_time: float | None,
               item_vectors: Any = None) -> dict[str, Any]:
        """``item_vectors(ids, catalog) -> float32 (n, d)`` computes vectors for the two-tower."""
        version = self.last_version + 1
        stage = staging_dir(self.root, version)
        base = self.exports == 0 or self.exports % self.base_every == 0
        entries = self._save(stage, "base" if base else "delta")
        if not base and any(e["mode"] == "base" for e in entries):
            base = True  # a shard restarted: everyone writes a base
            entries = self._save(stage, "base")
        items = None
        if self.catalog is not None and item_vectors is not None:
            ids = self.catalog.all_ids() if base else self.catalog.touched_ids()
            items = (ids, item_vectors(ids) if ids.size else np.zeros((0, self.model.config.tower_dim), np.float32))
        man = publish(self.root, version=version, kind="base" if base else "delta",
                      parent_version=None if base else self.last_version, pass_id=pass_id,
                      num_shards=self.client.n_shards, tables=[t.name for t in self.model.tables],
                      model=self.model.config.model_dump(mode="json"), dense=self.model.params.as_dict(),
                      items=items, items_full=base, newest_record_time=newest_record_time)
        if self.catalog is not None:
            self.catalog.clear_touched()
        self.last_version = version
        self.exports += 1
        return {"version": version, "kind": man.kind, "pass": pass_id, "items": 0 if items is None else len(items[0])}

    def _save(self, stage: Any, mode: str) -> list[dict[str, Any]]:
        shutil.rmtree(stage, ignore_errors=True)
        stage.mkdir(parents=True)
        return self.client.save(into=str(stage / "shard-{shard}"), mode=mode, cursor="export")
