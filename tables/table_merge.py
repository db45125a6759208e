"""A sparse table made of the kept rows of several loaded tables (a shard count that changed).

Each source is a table loaded from one old shard's save; :func:`take_part` copies the rows
(every column: values, optimizer state, counts, epochs), tombstones and admission state the
predicate keeps, and :func:`load_parts` makes the target table of them in one swap under its
lock, as a base load does. The sources hold disjoint keys (a key lived on one old shard), so
the rows are concatenated as they are; a key kept from two sources (a per-shard row such as a
rate table's clock) is taken from the first. Admission sketches and counters of one policy
are summed: the sketch of disjoint streams is the sum of their sketches; a source's running
totals (the table's counters, admitted and pending counts) go with the share of its rows kept,
so a shard split in three does not count its history three times. Deltas never span
the change: every cursor's rows and tombstones are stamped changed now, so whatever is saved
next on any cursor holds them all (a shard saves a base after a restore anyway).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from core.errors import Conflict
from tables.admission import make_admission
from tables.rows import MOVE_CHUNK, RowStore
from tables.table_config import TableConfig
from tables.table_files import StoredTable
from tables.table_state import Cursor, TableState

REPLACED = "re-placed"  # the save id the cursors of a merged table name: no delta follows it


@dataclass
class TablePart:
    """What one source table gives the merged table."""

    cols: dict[str, np.ndarray]  # the kept rows, every column
    tomb_keys: np.ndarray
    admission: dict[str, np.ndarray]
    counters: dict[str, int]
    config: TableConfig
    hash_key: np.ndarray
    pass_id: int
    epoch: int
    cursors: list[str]
    share: float  # of the source's rows kept: its running totals are counted with this weight


def take_part(t: StoredTable, keep: Callable[[np.ndarray], np.ndarray]) -> TablePart:
    """Copies of the rows (of both tiers) and tombstones of ``t`` whose keys ``keep`` (a
    vectorised predicate) keeps."""
    with t.lock.mutex:
        st = t.state
        n = st.rows.n
        mask = keep(st.rows.cols["keys"][:n])
        cols = {k: c[:n][mask] for k, c in st.rows.cols.items()}
        total, kept = n, int(mask.sum())
        if t.tier is not None and t.tier.disk.rows:
            disk = t.tier.disk
            at = disk.live_records()
            at = at[keep(disk.read(at, ("keys",))["keys"])]
            on_disk = disk.read(at)
            cols = {k: np.concatenate([c, on_disk[k]]) for k, c in cols.items()}
            total, kept = total + disk.rows, kept + int(at.shape[0])
        tombs = st.tomb_keys[keep(st.tomb_keys)] if st.tomb_keys.shape[0] else st.tomb_keys
        return TablePart(cols=cols, tomb_keys=tombs.copy(),
                         admission={k: v.copy() for k, v in st.admission.state().items()},
                         counters=dict(t.counters), config=t.config, hash_key=st.hash_key.copy(),
                         pass_id=st.pass_id, epoch=st.epoch, cursors=list(st.cursors),
                         share=kept / total if total else 1.0)


_TOTALS = "admission_counters"  # admitted and pending: running totals, not a sketch


def _merged_admission(parts: list[TablePart], table: str) -> dict[str, np.ndarray]:
    first = parts[0].admission
    merged = {k: np.zeros_like(v) for k, v in first.items()}
    for part in parts:
        if part.admission.keys() != first.keys() or any(v.shape != first[k].shape for k, v in part.admission.items()):
            raise Conflict(f"table {table!r}: the old shards' admission policies differ; cannot merge their state")
        for k, v in part.admission.items():
            if k == "draws":
                merged[k] = np.maximum(merged[k], v)
            elif k == _TOTALS:
                merged[k] = merged[k] + np.rint(v * part.share).astype(v.dtype)
            else:
                merged[k] = merged[k] + v
    return merged


def load_parts(t: StoredTable, parts: list[TablePart]) -> None:
    """Make ``t`` the union of ``parts`` (see the module docstring); the caller fits the budget.
    A table with a disk tier takes the rows a chunk at a time (:meth:`TableTier.load_rows`: RAM
    up to its budget, the rest on disk), never a row store of them all."""
    if not parts:
        return
    first = parts[0]
    keys = np.concatenate([p.cols["keys"] for p in parts])
    _, once = np.unique(keys, return_index=True)
    once.sort()  # first source's copy of a repeated key
    bounds = np.cumsum([0] + [p.cols["keys"].shape[0] for p in parts])
    picks = [once[(once >= a) & (once < b)] - a for a, b in itertools.pairwise(bounds)]
    n = int(once.shape[0])
    epoch = max(p.epoch for p in parts)
    tier = t.tier
    store = RowStore(t.state.rows.widths, t.config.initial_capacity if tier is not None
                     else max(n, t.config.initial_capacity))
    if tier is None:
        at = 0
        for part, pick in zip(parts, picks, strict=True):
            for k, c in part.cols.items():
                store.cols[k][at : at + pick.shape[0]] = c[pick]
            at += pick.shape[0]
        store.cols["mod_epoch"][:n] = epoch
        store.n = n
    admission = make_admission(first.config.admission, first.config.seed)
    admission.load_state(_merged_admission(parts, t.name))
    state = TableState.indexed(store, first.hash_key, admission, t.config.initial_capacity)
    tombs = np.unique(np.concatenate([p.tomb_keys for p in parts]))
    state.tomb_keys, state.tomb_epochs = tombs, np.full(tombs.shape[0], epoch, np.uint32)
    state.pass_id = max(p.pass_id for p in parts)
    state.epoch = epoch + 1
    state.cursors = {c: Cursor(epoch - 1, REPLACED) for p in parts for c in p.cursors}
    counters = {k: round(sum(p.counters.get(k, 0) * p.share for p in parts)) for k in t.counters}
    with t.lock.mutex:
        t.lock.wait_idle()
        t.state = state
        t.config = first.config
        t.counters.update(counters)
        if tier is not None:
            tier.expect_rows(n)
            for part, pick in zip(parts, picks, strict=True):
                for s in range(0, pick.shape[0], MOVE_CHUNK):
                    chunk = {k: c[pick[s : s + MOVE_CHUNK]] for k, c in part.cols.items()}
                    chunk["mod_epoch"][:] = epoch
                    tier.load_rows(chunk)
