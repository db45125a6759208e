"""Virtual shards and their placement on shard processes.

A key belongs to one of ``VIRTUAL_SHARDS`` (4,096) virtual shards, ``(fmix64(key ^ ROUTING_SALT)
>> 32) % 4096`` (:mod:`ps.routing`), fixed for the life of the data. A :class:`Placement` maps
each virtual shard to a shard process: a 4,096-entry int32 table with a version. The default
placement of ``n`` shards is ``v % n``; for ``n`` a power of two that is the routing of the
saves written before virtual shards existed (``h % n == (h % 4096) % n``), so their passes
load as they are. Every shard save records the placement it was written under (``shard.json``)
and so does the pass manifest; a restart with another shard count places the virtual shards
again (the default placement of the new count, version + 1) and every new shard loads the rows
now placed on it from all the old shards' saves (:mod:`ps.shard_replace`).

Moving one virtual shard while the job runs is a later step this table is shaped for: the
placement is data (a version and a table), not arithmetic on the shard count, so a move is a
new version differing in one entry. The steps would be: the source shard copies the virtual
shard's rows (a key-filtered save) to the target, both serve it under the old version until
the target has caught up, then every client takes version + 1 and a shard refuses a request
routed by an older version (the version travels with each request), so no push lands twice.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from core.errors import Conflict, CorruptData

VIRTUAL_SHARDS = 4096


@dataclass(frozen=True, eq=False)
class Placement:
    """Virtual shard ``v`` lives on shard ``table[v]``; ``version`` grows with each re-placement."""

    table: np.ndarray  # int32 (VIRTUAL_SHARDS,), values in [0, n_shards)
    n_shards: int
    version: int = 1

    def same_table(self, other: Placement) -> bool:
        return self.n_shards == other.n_shards and bool(np.array_equal(self.table, other.table))

    def to_meta(self) -> dict[str, Any]:
        """The JSON form saved in shard.json and pass.json."""
        return {"version": self.version, "n_shards": self.n_shards, "virtual_shards": VIRTUAL_SHARDS,
                "table": self.table.tolist()}

    @classmethod
    def from_meta(cls, meta: Any, where: str) -> Placement:
        """The placement ``meta`` (:meth:`to_meta`) describes; CorruptData naming ``where`` if it is malformed."""
        try:
            virtual = int(meta.get("virtual_shards", VIRTUAL_SHARDS))
        except (AttributeError, TypeError, ValueError) as exc:
            raise CorruptData(f"{where}: malformed shard placement ({exc})", detail={"file": where}) from None
        if virtual != VIRTUAL_SHARDS:
            raise Conflict(f"{where}: placement of {virtual} virtual shards; this build routes keys to "
                           f"{VIRTUAL_SHARDS}, so its rows cannot be placed", detail={"file": where})
        try:
            n, version, table = int(meta["n_shards"]), int(meta["version"]), np.asarray(meta["table"], np.int64)
            if table.shape != (VIRTUAL_SHARDS,) or n < 1 or table.min() < 0 or table.max() >= n:
                raise ValueError(f"table of shape {table.shape} with shards outside 0..{n - 1}")
        except (KeyError, TypeError, ValueError) as exc:
            raise CorruptData(f"{where}: malformed shard placement ({exc})", detail={"file": where}) from None
        fixed = table.astype(np.int32)
        fixed.setflags(write=False)  # one array type for every placement: one compiled routing kernel
        return cls(fixed, n, version)


@lru_cache(maxsize=64)
def default_placement(n_shards: int) -> Placement:
    """``v % n_shards``: for a power of two, the routing of saves that record no placement."""
    if n_shards < 1:
        raise ValueError(f"n_shards must be >= 1, got {n_shards}")
    table = (np.arange(VIRTUAL_SHARDS, dtype=np.int32) % np.int32(n_shards)).astype(np.int32)
    table.setflags(write=False)
    return Placement(table, n_shards, 1)


def routes_like_legacy(n_shards: int) -> bool:
    """Whether the default placement of ``n_shards`` routes as ``h % n_shards`` did (n divides 4,096)."""
    return n_shards >= 1 and VIRTUAL_SHARDS % n_shards == 0


def saved_placement(manifest: dict[str, Any], n_saved: int, where: str) -> Placement | None:
    """The placement a pass was written under: its recorded one; for one written before
    placements were recorded, the default when that equals its routing, else None (unknown:
    every new shard then reads every old shard's save and keeps the rows placed on it)."""
    if "placement" in manifest:
        placement = Placement.from_meta(manifest["placement"], where)
        if placement.n_shards != n_saved:
            raise CorruptData(f"{where}: placement of {placement.n_shards} shards in a pass of {n_saved}",
                              detail={"file": where})
        return placement
    return default_placement(n_saved) if routes_like_legacy(n_saved) else None


def placement_for(saved: Placement | None, n_shards: int) -> Placement:
    """The placement a job of ``n_shards`` runs on a pass written under ``saved`` (None: written
    before placements were recorded): the same when the count is the same, else the default of
    the new count, one version on. Rows whose placement changed are loaded by key from every old
    shard's save (:mod:`ps.shard_replace`), so any old routing can be placed anew."""
    if saved is not None and saved.n_shards == n_shards:
        return saved
    fresh = default_placement(n_shards)
    return fresh if saved is None else Placement(fresh.table, n_shards, saved.version + 1)
