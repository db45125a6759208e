"""From a parsed ``Batch`` to what a model step needs: per table, the batch's unique keys
(deduplicated across all its slots: one pull per table) and each id's index into them.

Building features is pure numpy/numba over the batch, so the prefetch stage can do it (and
the pull) for the next batch while the current one computes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from core.errors import InvalidInput
from core.kernel_cache import kernel
from logrecords.batch import Batch
from logrecords.dense_transform import DenseTransform, apply_dense_transforms
from models.model_config import ITEM_BIAS_TABLE, ModelConfig, ModelType, Pooling, SlotSpec, Tower
from tables.dedupe import dedupe


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
    transforms: tuple[DenseTransform, ...]  # the config's dense transforms ``dense`` was made with

    def rows_of(self, rows: dict[str, np.ndarray], table: str) -> np.ndarray:
        """``rows[table]``, checked to hold a row for each of this batch's keys of ``table``: the
        kernels index it without bounds checks, and rows pulled for another batch would be read
        past their end (garbage, not an error)."""
        got, want = rows[table].shape[0], self.tables[table].keys.shape[0]
        if got < want:
            raise ValueError(f"table {table!r}: {got} rows for a batch of {want} keys (rows of another batch?)")
        return rows[table]


@dataclass(frozen=True)
class _TablePlan:
    """What a batch does not change: a table's slots and their pooling."""

    name: str
    specs: tuple[SlotSpec, ...]
    mean: np.ndarray  # read-only, shared by every batch's TableInput


_PLANS: dict[tuple[int, int], tuple[ModelConfig, tuple[SlotSpec, ...], list[_TablePlan]]] = {}


def _plan(config: ModelConfig, slots: tuple[SlotSpec, ...]) -> list[_TablePlan]:
    """The tables of ``slots``, cached by identity (hashing a config costs ~40 us, more than a
    step's feature kernels); the entry holds the objects, so their ids stay theirs."""
    hit = _PLANS.get((id(config), id(slots)))
    if hit is not None and hit[0] is config and hit[1] is slots:
        return hit[2]
    by_table: dict[str, list[SlotSpec]] = {}
    for s in slots:
        by_table.setdefault(config.table_name(s), []).append(s)
    plan = []
    if config.type is ModelType.TWO_TOWER and config.retrieval.item_bias is not None:
        # two_tower's per-id item biases: the item-tower slots' ids again, in a 1-float table of their own
        item = [s for s in slots if s.tower is Tower.ITEM]
        if item:
            by_table[ITEM_BIAS_TABLE] = item
    for name, specs in by_table.items():
        mean = np.array([s.pooling is Pooling.MEAN for s in specs], np.bool_)
        mean.flags.writeable = False
        plan.append(_TablePlan(name, tuple(specs), mean))
    if len(_PLANS) >= 64:
        _PLANS.clear()
    _PLANS[(id(config), id(slots))] = (config, slots, plan)
    return plan


def _slot(batch: Batch, name: str, n: int) -> tuple[np.ndarray, np.ndarray]:
    got = batch.slots.get(name)
    if got is None:  # a slot the record schema lacks reads as "no ids"
        return np.empty(0, np.uint64), np.zeros(n + 1, np.int64)
    values, offsets = got
    if offsets.shape != (n + 1,) or values.dtype != np.uint64:
        raise InvalidInput(f"slot {name!r}: offsets must be ({n + 1},) and values uint64")
    return values, offsets


@kernel(nogil=True, error_model="numpy")
def _offsets_and_counts(raw, idx, labels, m):
    """Slots end to end: ``offs`` (n_slots, n + 1) with slot s's offsets shifted to where its
    values start; and per unique key, its occurrences (shows) and those in clicked records
    (clicks): one pass over the ids."""
    n_slots, n1 = raw.shape
    offs = np.empty((n_slots, n1), np.int64)
    shows = np.zeros(m, np.float32)
    clicks = np.zeros(m, np.float32)
    start = 0
    for s in range(n_slots):
        r0 = raw[s, 0]
        for i in range(n1):
            offs[s, i] = start + raw[s, i] - r0
        for i in range(n1 - 1):
            y = labels[i]
            for j in range(offs[s, i], offs[s, i + 1]):
                u = idx[j]
                shows[u] += np.float32(1.0)
                clicks[u] += y
        start = offs[s, n1 - 1]
    return offs, shows, clicks


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
    if config.dense_transforms or config.dense_log1p:
        dense = apply_dense_transforms(dense, config.dense_transforms)
    labels = np.ascontiguousarray(batch.labels, np.float32)
    tables = {}
    for plan in _plan(config, chosen):
        parts = [_slot(batch, s.name, n) for s in plan.specs]
        values = np.concatenate([v for v, _ in parts]) if len(parts) > 1 else np.ascontiguousarray(parts[0][0])
        raw = np.stack([o for _, o in parts]).astype(np.int64, copy=False)
        keys, idx = dedupe(values)
        offs, shows, clicks = _offsets_and_counts(raw, idx, labels, keys.shape[0])
        tables[plan.name] = TableInput(keys=keys, idx=idx, offs=offs, mean=plan.mean, slots=plan.specs,
                                       shows=shows, clicks=clicks)
    return Features(n=n, labels=labels, dense=np.ascontiguousarray(dense), tables=tables,
                    transforms=config.dense_transforms)
