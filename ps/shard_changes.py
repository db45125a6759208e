"""The CHANGES op: a shard's changed-keys log of one table (:mod:`tables.change_log`), read
from a cursor, for readers that follow training live (the service's item-vector refresh).

Request: the table, meta ``{generation, since, limit, slot?}`` (a first read sends generation
0). Reply: arrays ``[keys uint64, push times float64]`` and meta ``{generation, seq, reset}``;
the reader sends the reply's ``generation`` and ``seq`` next time. ``reset``: changes may be
missing (first read, ring wrapped, or the table was loaded from a save since). ``slot``: only
keys of that slot id (the top byte) travel, the cursor still moves past the others; ``-1``:
no keys at all and the cursor jumps to the end (a reader that only watches the generation).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from core.errors import InvalidInput
from ps.protocol import Message
from ps.shard_requests import ok
from tables.change_log import Changes
from tables.sparse_table import SparseTable

MAX_LIMIT = 1 << 18  # keys per reply: well under the smallest frame limit (8 bytes + 8 bytes a key)


def changes_reply(table: SparseTable, msg: Message) -> Message:
    try:
        generation, since, limit = (int(msg.meta.get(k, 0)) for k in ("generation", "since", "limit"))
    except (TypeError, ValueError):
        raise InvalidInput("changes needs integer meta 'generation', 'since' and 'limit'") from None
    if since < 0 or not 0 < limit <= MAX_LIMIT:
        raise InvalidInput(f"changes: since must be >= 0 and limit in 1..{MAX_LIMIT}",
                           detail={"since": since, "limit": limit})
    slot = msg.meta.get("slot")
    if slot is not None and (not isinstance(slot, int) or not -1 <= slot <= 255):
        raise InvalidInput("changes: slot must be a slot id 0..255, or -1", detail={"slot": slot})
    with table.lock.mutex:
        got = table.changes.read(generation, since, 0 if slot == -1 else limit)
        seq = table.changes.seq if slot == -1 else got.seq  # a watcher skips to the end
    keys, times = got.keys, got.times
    if slot is not None and slot >= 0:
        mine = (keys >> np.uint64(56)) == np.uint64(slot)
        keys, times = keys[mine], times[mine]
    return ok(msg, keys, times, meta={"generation": got.generation, "seq": seq, "reset": got.reset})


def changes_meta(cursor: tuple[int, int], limit: int, slot: int | None = None) -> dict[str, Any]:
    """The request meta for a reader at ``cursor`` = (generation, seq), of keys of ``slot`` only
    (-1: none, only the generation is watched)."""
    meta = {"generation": int(cursor[0]), "since": int(cursor[1]), "limit": min(int(limit), MAX_LIMIT)}
    return meta if slot is None else {**meta, "slot": int(slot)}


def changes_of(replies: list[Message]) -> list[Changes]:
    """Each shard's reply, in shard order."""
    return [Changes(r.arrays[0], r.arrays[1], int(r.meta["generation"]), int(r.meta["seq"]), bool(r.meta["reset"]))
            for r in replies]
