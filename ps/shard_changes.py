"""The CHANGES op: a shard's changed-keys log of one table (:mod:`tables.change_log`), read
from a cursor, for readers that follow training live (the service's item-vector refresh).

Request: the table, meta ``{generation, since, limit}`` (a first read sends generation 0).
Reply: arrays ``[keys uint64, push times float64]`` and meta ``{generation, seq, reset}``;
the reader sends the reply's ``generation`` and ``seq`` next time. ``reset``: changes may be
missing (first read, ring wrapped, or the table was loaded from a save since).
"""

from __future__ import annotations

from typing import Any

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
    with table.lock.mutex:
        got = table.changes.read(generation, since, limit)
    return ok(msg, got.keys, got.times, meta={"generation": got.generation, "seq": got.seq, "reset": got.reset})


def changes_meta(cursor: tuple[int, int], limit: int) -> dict[str, Any]:
    """The request meta for a reader at ``cursor`` = (generation, seq)."""
    return {"generation": int(cursor[0]), "since": int(cursor[1]), "limit": min(int(limit), MAX_LIMIT)}


def changes_of(replies: list[Message]) -> list[Changes]:
    """Each shard's reply, in shard order."""
    return [Changes(r.arrays[0], r.arrays[1], int(r.meta["generation"]), int(r.meta["seq"]), bool(r.meta["reset"]))
            for r in replies]
