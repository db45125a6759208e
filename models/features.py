"""From a parsed ``Batch`` to what a model step needs: per table, the batch's unique keys
(deduplicated across all its slots: one pull per table) and each id's index into them.

Building features is pure numpy/numba over the batch, so the prefetch stage can do it (and
the pull) for the next batch while the current one computes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from core.errors import InvalidInput
from models.model_config import ModelConfig, Pooling, SlotSpec
from streaming.batch import Batch
from tables.dedupe import dedupe, sum_values


@dataclass
class TableInput:
    """The ids of one table's slots in one batch.

    keys:   uint64[u] unique ids (first-seen order) — what is pulled and pushed
    idx:    int64[nnz] index into ``keys`` of every id, slots concatenated
    offs:   int64[n_slots, n + 1] record i of slot s owns idx[offs[s, i]:offs[s, i + 1]]
    mean:   bool[n_slots] mean pooling per slot
    slots:  the slots, in column order
    shows, clicks: float32[u] occurrences of each key, and those in clicked records
    """

    keys: np.ndarray
    idx: np.ndarray
    offs: np.ndarray
    mean: np.ndarray
    slots: tuple[SlotSpec, ...]
    shows: np.ndarray
    clicks: np.ndarray


@dataclass
class Features:
    n: int
    labels: np.ndarray  # float32[n]
    dense: np.ndarray  # float32[n, n_dense], transformed
    tables: dict[str, TableInput]


def _slot(batch: Batch, name: str, n: int) -> tuple[np.ndarray, np.ndarray]:
    got = batch.slots.get(name)
    if got is None:  # a slot the record schema lacks reads as "no ids"
        return np.empty(0, np.uint64), np.zeros(n + 1, np.int64)
    values, offsets = got
    if offsets.shape != (n + 1,) or values.dtype != np.uint64:
        raise InvalidInput(f"slot {name!r}: offsets must be ({n + 1},) and values uint64")
    return values, offsets


def build_features(config: ModelConfig, batch: Batch, slots: tuple[SlotSpec, ...] | None = None) -> Features:
    """Features of ``batch`` for ``config`` (only ``slots`` when given, e.g. one tower)."""
    n = len(batch)
    chosen = config.slots if slots is None else slots
    dense = np.asarray(batch.dense, np.float32)
    if dense.ndim == 2 and dense.shape[0] == n and dense.shape[1] < config.n_dense and slots is not None:
        dense = np.zeros((n, config.n_dense), np.float32)  # one tower (items): it reads no dense inputs
    if dense.ndim != 2 or dense.shape[0] != n or dense.shape[1] < config.n_dense:
        raise InvalidInput(f"batch dense is {dense.shape}, model needs ({n}, {config.n_dense})")
    dense = dense[:, : config.n_dense]
    if config.dense_log1p:
        dense = np.log1p(np.maximum(dense, 0.0)).astype(np.float32)
    labels = np.asarray(batch.labels, np.float32)
    by_table: dict[str, list[SlotSpec]] = {}
    for s in chosen:
        by_table.setdefault(config.table_name(s), []).append(s)
    tables = {}
    for name, specs in by_table.items():
        parts = [_slot(batch, s.name, n) for s in specs]
        values = np.concatenate([v for v, _ in parts]) if parts else np.empty(0, np.uint64)
        # slots end to end: slot s's offsets shifted to where its values start (vectorized over slots)
        raw = np.stack([o for _, o in parts]).astype(np.int64, copy=False)
        lengths = np.diff(raw, axis=1)
        ends = np.cumsum(raw[:, -1] - raw[:, 0])
        offs = raw - raw[:, :1]
        offs[1:] += ends[:-1, None]
        keys, idx = dedupe(np.ascontiguousarray(values))
        # labels repeated per id: an id's clicks are the clicked records it appears in
        per_id_label = np.repeat(np.tile(labels, len(specs)), lengths.ravel())
        shows = sum_values(np.ones(values.shape[0], np.float32), idx, keys.shape[0])
        clicks = sum_values(per_id_label, idx, keys.shape[0])
        tables[name] = TableInput(keys=keys, idx=idx, offs=offs,
                                  mean=np.array([s.pooling is Pooling.MEAN for s in specs], np.bool_),
                                  slots=tuple(specs), shows=shows, clicks=clicks)
    return Features(n=n, labels=labels, dense=np.ascontiguousarray(dense), tables=tables)
