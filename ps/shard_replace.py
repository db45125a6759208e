"""Loading a chain of saves into a shard: as written (:func:`replay`), or placed anew.

A pass written by ``n`` shards restored by ``m`` (or under another placement, :mod:`ps.placement`):
shard ``s`` replays every old shard's chain, one at a time, into scratch tables (each file
verified first, as any restore), keeps the rows, tombstones and admission state of the keys the
new placement puts on ``s`` (:mod:`tables.table_merge`), and makes its tables of them. Dense
arrays are put back together from all the old shards' parts and cut again over the new count
(:func:`ps.routing.place_dense`); ``s`` keeps its slices. Any missing or corrupt save of any
old shard fails the load before the shard's own tables change.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

import numpy as np

from core.errors import CorruptData
from ps.placement import Placement
from ps.routing import place_dense, shard_of
from ps.shard_id_rows import adopt_saved
from ps.shard_saves import restore_plan, verify_plan
from ps.shard_tables import ShardTables
from tables.dense_table import DenseTable
from tables.id_rows_table import RATE_CLOCK_KEY, RATE_WORDS, IdRowsTable, is_id_rows
from tables.table_config import DenseTableConfig, OptimizerConfig
from tables.table_merge import TablePart, take_part

log = logging.getLogger(__name__)

_SLICE = re.compile(r"^(?P<name>.+)\.slice(?P<i>\d+)of(?P<n>\d+)$")
DenseSaved = tuple[dict[str, Any], dict[str, Any]]  # (size and optimizer, DenseTable.snapshot())


def replay(tables: ShardTables, plan: list[tuple[Path, dict[str, Any]]]) -> None:
    """Load ``plan`` (:func:`ps.shard_saves.restore_plan`) into ``tables``, once every file of it verified."""
    adopt_saved(tables, plan)  # id-rows tables exist once written: make those the saves hold
    verify_plan(plan, set(tables.sparse))
    for save_dir, man in plan:
        for name in man["sparse"]:
            if name in tables.sparse:
                tables.sparse[name].load(save_dir / "sparse" / name)
    last_dir, last = plan[-1]
    for name, meta in last["dense"].items():
        cfg = DenseTableConfig(name=name, optimizer=OptimizerConfig.model_validate(meta["optimizer"]))
        table = DenseTable(cfg, initial=np.zeros(meta["size"], np.float32))
        table.load(last_dir / "dense" / name)
        tables.add_dense(name, meta, table)


def restore_replaced(tables: ShardTables, sources: list[list[Path]], placement: Placement,
                     dense_slice_min_elements: int) -> None:
    """Make shard ``tables.index``'s tables of the rows ``placement`` puts on it, from the chains
    ``sources`` (old shard ``j``'s save dirs, oldest first, at ``sources[j]``)."""
    index = tables.index

    def keep(keys: np.ndarray) -> np.ndarray:
        return shard_of(keys, placement) == index

    def keep_with_clock(keys: np.ndarray) -> np.ndarray:
        return keep(keys) | (keys == RATE_CLOCK_KEY)  # every shard has its own rate clock

    configs = [t.configured for name, t in tables.sparse.items() if not is_id_rows(name)]
    share = next((t.sketch_share for t in tables.sparse.values()), None)
    parts: dict[str, list[TablePart]] = {}
    dense: dict[str, DenseSaved] = {}
    for dirs in sources:
        scratch = ShardTables(configs, index=index, id_rows_tier=tables.id_rows_tier,
                              **({} if share is None else {"sketch_share": share}))
        replay(scratch, restore_plan(dirs))
        for name, table in scratch.sparse.items():
            clock = isinstance(table, IdRowsTable) and table.words == RATE_WORDS
            parts.setdefault(name, []).append(take_part(table, keep_with_clock if clock else keep))
        for name, table in scratch.dense.items():
            dense[name] = (scratch.dense_meta[name], table.snapshot())
        del scratch
    placed = _cut_dense(dense, placement.n_shards, index, dense_slice_min_elements)
    for name, table_parts in parts.items():
        if name not in tables.sparse:  # an id-rows table the old shards made: made here too
            made = table_parts[0].config
            tables.add_id_rows(name, made.dim // 2, ttl_passes=made.eviction.ttl_passes)
        tables.sparse[name].load_parts(table_parts)
    tables.dense.clear()
    tables.dense_meta.clear()
    for part, (meta, table) in placed.items():
        tables.add_dense(part, meta, table)
    log.info("shard %d of %d: placed anew (placement version %d) from %d old shards' saves", index,
             placement.n_shards, placement.version, len(sources))


def _cut_dense(dense: dict[str, DenseSaved], n_shards: int, index: int,
               slice_min: int) -> dict[str, tuple[dict[str, Any], DenseTable]]:
    """The dense parts shard ``index`` of ``n_shards`` holds, cut from the old shards' parts."""
    whole: dict[str, list[tuple[int, int, DenseSaved]]] = {}
    for part, saved in dense.items():
        m = _SLICE.match(part)
        if m is None:
            whole.setdefault(part, []).append((0, 1, saved))
        else:
            whole.setdefault(m["name"], []).append((int(m["i"]), int(m["n"]), saved))
    out: dict[str, tuple[dict[str, Any], DenseTable]] = {}
    for name, pieces in whole.items():
        pieces.sort(key=lambda p: p[0])
        count = pieces[0][1]
        if [p[0] for p in pieces] != list(range(count)) or any(p[1] != count for p in pieces):
            raise CorruptData(f"dense {name!r}: the old shards' saves hold slices {[p[0] for p in pieces]} "
                              f"of {count}; cannot put it together")
        meta = pieces[0][2][0]
        snaps = [p[2][1] for p in pieces]
        value = np.concatenate([s["value"] for s in snaps])
        sizes = [s["value"].shape[0] for s in snaps]
        state = {k: (np.concatenate([s["state"][k] for s in snaps])
                     if all(s["state"][k].shape == (z,) for s, z in zip(snaps, sizes, strict=True)) and len(snaps) > 1
                     else snaps[0]["state"][k]) for k in snaps[0]["state"]}
        whole_elementwise = {k for k, v in state.items() if v.shape == value.shape}
        version = max(int(s["version"]) for s in snaps)
        for sl in place_dense(name, value.shape[0], n_shards, slice_min_elements=slice_min):
            if sl.shard != index:
                continue
            cfg = DenseTableConfig(name=sl.part, optimizer=OptimizerConfig.model_validate(meta["optimizer"]))
            table = DenseTable(cfg, initial=value[sl.start:sl.stop].copy())
            table.load_snapshot({"value": value[sl.start:sl.stop],
                                 "state": {k: v[sl.start:sl.stop] if k in whole_elementwise else v
                                           for k, v in state.items()}, "version": version})
            out[sl.part] = ({"size": sl.stop - sl.start, "optimizer": meta["optimizer"]}, table)
    return out
