"""A sparse table's byte budget: what it holds, and how many rows fit.

A table's bytes are what it really holds, allocated, not what it uses: the row store at its
capacity (every column: key, parameters, optimizer state, show/click/pass/epoch metadata,
growth slack included), the hash index (8 bytes a slot), the admission sketches, the
tombstones a delta save still owes and the index's hash key. :func:`rows_within` turns a
budget into a row limit: the largest row count whose store (capacity = limit) and index
(the power-of-two slot count that holds it under ``MAX_LOAD``) fit beside the fixed bytes.
The table caps its capacity growth at that limit, so doubling never overshoots.

A table's budget is ``eviction.max_bytes``, or its share of its shard's ``max_bytes``
(:func:`split_shard_budget`), whichever is smaller. Pushes enforce it when rows are created
(:class:`tables.sparse_table.SparseTable`): ``over_budget: refuse`` refuses new ids once no
row fits, ``evict`` evicts the coldest rows first.

Tombstones are part of the budget: an evicted id is remembered until every save chain's next
delta carried it (none is kept when no chain exists). So a flood of new ids into a full
evict-mode table between two saves turns rows into tombstones; once tombstones hold
1/``TOMBSTONE_SHARE`` of the budget the table stops evicting and refuses new ids until the
next save prunes them, rather than emptying itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from core.errors import ConfigError
from tables import hashmap
from tables.table_state import TableState

SLOT_BYTES = 8  # one uint64 per index slot
TOMBSTONE_BYTES = 12  # uint64 key + uint32 epoch
EVICT_SLACK = 16  # evict mode frees 1/EVICT_SLACK of the limit beyond what a push needs
TOMBSTONE_SHARE = 4  # evict mode stops evicting (and refuses) while tombstones hold 1/4 of the budget


def tombstone_bytes(st: TableState) -> int:
    return st.tomb_keys.nbytes + st.tomb_epochs.nbytes


def fixed_bytes(st: TableState) -> int:
    """Bytes that do not scale with the row capacity: sketches, tombstones, hash key."""
    return st.admission.memory_bytes() + tombstone_bytes(st) + st.hash_key.nbytes


def reserved_fixed_bytes(st: TableState, budget: int) -> int:
    """:func:`fixed_bytes` as a row limit counts them: tombstones rounded up to the next
    1/``EVICT_SLACK`` of the budget, so the limit (and the capacity) steps down once per many
    evictions, not on every one (each step reallocates the store)."""
    step = max(1, budget // EVICT_SLACK)
    tombs = tombstone_bytes(st)
    return fixed_bytes(st) - tombs + -(-tombs // step) * step


def table_bytes(st: TableState) -> int:
    """Everything the table holds, allocated (capacity, not rows in use)."""
    return sum(c.nbytes for c in st.rows.cols.values()) + st.slots.nbytes + fixed_bytes(st)


def rows_within(budget: int, row_bytes: int, fixed: int) -> int:
    """Most rows a table can hold in ``budget`` bytes: store capacity ``r`` rows of
    ``row_bytes`` plus an index big enough for ``r`` plus ``fixed``. 0 when none fit."""
    best, slots = 0, 16
    while True:
        room = budget - fixed - SLOT_BYTES * slots
        if room < row_bytes:
            return best
        fits = int(slots * hashmap.MAX_LOAD)  # what this slot count holds (hashmap.slots_for)
        best = max(best, min(fits, room // row_bytes))
        if room // row_bytes < fits:
            return best  # a bigger index only leaves less room for rows
        slots *= 2


def check_budget(budget: int, row_bytes: int, fixed: int, *, key: str, table: str) -> int:
    """The row limit of ``budget``; a ConfigError naming ``key`` when not one row fits."""
    limit = rows_within(budget, row_bytes, fixed)
    if limit < 1:
        need = fixed + SLOT_BYTES * 16 + row_bytes
        raise ConfigError(f"table {table}: {key} = {budget} bytes cannot hold one row (needs at least {need}: "
                          f"{fixed} fixed for admission sketches and hash key, {SLOT_BYTES * 16} for the smallest "
                          f"index, {row_bytes} a row)", detail={"keys": [key], "table": table, "min_bytes": need})
    return limit


def split_shard_budget(total: int, fixed: list[int], per_row: list[float]) -> list[int]:
    """A shard's ``max_bytes`` over its tables: each gets its fixed bytes, and the rest is
    shared in proportion to each table's bytes per row (row store + index slots), so every
    table can hold about the same number of rows."""
    rest = total - sum(fixed)
    if rest <= 0 or not per_row:
        raise ConfigError(f"shard.max_bytes = {total} bytes does not cover its tables' fixed bytes "
                          f"({sum(fixed)}: admission sketches, hash keys)", detail={"keys": ["shard.max_bytes"]})
    weight = sum(per_row)
    return [f + int(rest * w / weight) for f, w in zip(fixed, per_row, strict=True)]


def share_shard_budget(tables: Sequence[Any], max_bytes: int | None) -> None:
    """Give each of a shard's sparse tables (:class:`tables.sparse_table.SparseTable`) its
    share of the shard's ``max_bytes`` (None: no shard budget)."""
    if max_bytes is None or not tables:
        return
    shapes = [t.budget_shape() for t in tables]
    shares = split_shard_budget(max_bytes, [f for f, _ in shapes], [r for _, r in shapes])
    for t, share in zip(tables, shares, strict=True):
        t.set_shard_budget(share)
