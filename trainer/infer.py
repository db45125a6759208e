"""Infer mode (Paddle's infer_from_dataset): score files with the parameters on the PS, nothing
pushed; for a two-tower model also the vectors of every item the files name (the catalogue)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from core.atomic_files import encode_arrays, write_bytes
from exports.item_catalog import ItemCatalog
from models import build_model
from models.base import Model
from models.features import build_features
from models.model_config import ModelType
from models.two_tower import as_two_tower
from ps.cluster import ClusterSpec
from ps.ps_config import PSConfig, load_ps_config
from streaming.file_dataset import FileDataset
from trainer import checkpoints
from trainer.job_config import JobConfig
from trainer.metrics import Metrics
from trainer.params import PSStore
from trainer.ps_worker import PSWorker
from trainer.recovery import model_train_state
from trainer.worker import Worker


def load_dense_statistics(model: Model, checkpoint_dir: str) -> int | None:
    """Give ``model`` the standardized dense fields' running statistics the chief kept in the newest
    complete pass of ``checkpoint_dir`` (the transforms its bundle carries); returns that pass, or
    None when there is none to read (the schema's statistics stay)."""
    if model.dense_statistics is None:
        return None
    done = checkpoints.complete_passes(checkpoint_dir)
    if not done:
        return None
    _, arrays = checkpoints.read_worker_part(checkpoint_dir, done[-1], 0)
    model.load_train_state({k: v for k, v in model_train_state(arrays).items() if k.startswith("dense_stats.")})
    return done[-1]


def infer_files(config: JobConfig, spec: ClusterSpec, paths: Sequence[str], *, predictions: Path | None = None,
                items_out: Path | None = None, batch_size: int = 4096) -> dict[str, Any]:
    model = build_model(config.model)
    load_dense_statistics(model, config.checkpoint_dir)  # the PS's parameters were trained with them
    ps = PSWorker.from_spec(spec, config=load_ps_config(spec.ps_config) if spec.ps_config else PSConfig())
    try:
        worker = Worker(model, PSStore(ps, model.params.values, dense_rule=None))  # starts from the PS's dense vector
        data = FileDataset(list(paths), config.records, batch_size=batch_size)
        tower = as_two_tower(model) if model.config.type is ModelType.TWO_TOWER else None
        catalog = ItemCatalog(tuple(s.name for s in tower.item_slots)) if tower is not None else None
        metrics, scored, seen = Metrics(), [], []
        for batch in data:
            p = worker.score(batch)
            metrics.add(batch.labels, p)
            if predictions is not None:
                scored.append(p)
            if catalog is not None:
                seen.append(catalog.encode(batch))
        if predictions is not None:
            np.savetxt(predictions, np.concatenate(scored) if scored else np.zeros(0), fmt="%.6f")
        items = 0
        if tower is not None and catalog is not None and items_out is not None:
            ids, item_rows = _last_rows(seen, catalog.words)
            f = build_features(model.config, catalog.batch_of(ids, item_rows), tower.item_slots)
            rows = {t: ps.client.wait(ps.client.pull(t, ti.keys)) for t, ti in f.tables.items()}
            vectors = np.ascontiguousarray(tower.item_vectors(f, rows), np.float32)
            write_bytes(items_out, encode_arrays({"ids": ids, "vectors": vectors}))
            items = int(ids.shape[0])
        return {**metrics.summary(), "rejected": dict(data.dead_letters.counts), "items": items}
    finally:
        ps.close()


def _last_rows(seen: list[tuple[np.ndarray, np.ndarray]], words: int) -> tuple[np.ndarray, np.ndarray]:
    """Each item once, with its row from the last batch that held it."""
    if not seen:
        return np.empty(0, np.uint64), np.empty((0, words), np.uint64)
    ids = np.concatenate([i for i, _ in seen])
    rows = np.concatenate([r for _, r in seen])
    _, last = np.unique(ids[::-1], return_index=True)
    keep = np.sort(ids.shape[0] - 1 - last)
    return ids[keep], rows[keep]
