"""Enforcing a sparse table's byte budget when its rows are created (what counts, and how a
budget becomes a row limit, is in :mod:`tables.budget`).

:class:`TableBudget` belongs to one table and runs under that table's lock: before a push
creates rows it makes room (evict mode: the coldest rows go, never rows the same push
updates) and keeps only the new ids that fit (the rest are refused and counted); after a
policy change, a new shard share or a load it gives back the capacity beyond the limit.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import numpy as np

from tables import eviction, hashmap
from tables.budget import (
    EVICT_SLACK,
    SLOT_BYTES,
    TOMBSTONE_SHARE,
    check_budget,
    fixed_bytes,
    reserved_fixed_bytes,
    rows_within,
    tombstone_bytes,
)
from tables.table_config import TableConfig
from tables.table_lock import TableLock
from tables.table_state import TableState

if TYPE_CHECKING:
    from tables.admission import Admission
    from tables.tiering import TableTier


class BudgetedTable(Protocol):
    """What the budget reads and changes (:class:`tables.sparse_table.SparseTable` is one)."""

    name: str
    config: TableConfig
    counters: dict[str, int]
    state: TableState
    lock: TableLock
    tier: TableTier | None


# A tiered table's RAM budget also holds what its calls hold beside the rows: per key the reply's
# (or gradient's) row and about this many bytes of keys, row numbers and masks.
CALL_BYTES_PER_KEY = 48
# The reserve follows the largest recent call: smaller calls shrink it 1% per its own size in keys
# that go through them, so a stream of small calls (online lookups) between training's large
# ones leaves it, and the RAM rows, where they are.
CALL_DECAY = 0.99
MAX_CALL_SHARE = 4  # it takes at most a quarter of the budget: rows keep the rest


class TableBudget:
    """The byte budget of ``table``: its own ``eviction.max_bytes`` or its shard's share, the smaller."""

    def __init__(self, table: BudgetedTable) -> None:
        self.table = table
        self.shard_share: int | None = None  # this table's share of its shard's max_bytes
        self.call_keys = 0.0  # a tiered table's largest recent call, in keys (note_call)

    def in_force(self, config: TableConfig | None = None) -> tuple[int | None, str]:
        """The byte budget in force (None: unbounded) and the config key it comes from."""
        own = (config or self.table.config).eviction.max_bytes
        shard = self.shard_share
        if shard is not None and (own is None or shard < own):
            return shard, "shard.max_bytes"
        return own, "eviction.max_bytes"

    def row_limit(self, config: TableConfig, admission: Admission | None = None) -> int | None:
        """Rows that fit in ``config``'s budget now (with ``admission``'s sketches, when it
        replaces the table's); a ConfigError naming the key when not one does."""
        budget, key = self.in_force(config)
        if budget is None:
            return None
        st = self.table.state
        fixed = self._fixed(budget)
        if admission is not None:
            fixed += admission.memory_bytes() - st.admission.memory_bytes()
        return check_budget(budget, st.rows.row_nbytes(), fixed, key=key, table=self.table.name)

    def fit(self, limit: int | None) -> None:
        """Under the lock: give back capacity beyond ``limit`` rows (a new or lowered budget,
        tombstones grown), unless a snapshot is reading the store."""
        if limit is not None and self.table.state.rows.capacity > limit and self.table.lock.snapshot is None:
            self.table.state.compact(limit)

    def fit_loaded(self) -> None:
        """Under the lock, after a load: the budget in force now (the saved policy's) gives back
        the capacity beyond it; no error (push refuses what does not fit)."""
        budget, _ = self.in_force()
        if budget is not None:
            st = self.table.state
            self.fit(rows_within(budget, st.rows.row_nbytes(), self._fixed(budget)))

    def ram_row_limit(self) -> int | None:
        """Under the lock: rows the RAM tier may hold now (None: no budget)."""
        budget, _ = self.in_force()
        if budget is None:
            return None
        return rows_within(budget, self.table.state.rows.row_nbytes(), self._fixed(budget))

    def note_call(self, keys: int) -> None:
        """Under the lock: a tiered table's pull or push of ``keys`` keys is starting. Its
        temporaries are reserved in the RAM budget (:meth:`_fixed`), so the RAM tier's rows make
        room for them and the process stays within the budget while the call runs, as a memory
        limit (a container's) needs; a table without a tier evicts no learning for them."""
        held = self.call_keys
        self.call_keys = float(keys) if keys >= held else held * CALL_DECAY ** (keys / held)

    def _fixed(self, budget: int) -> int:
        """Fixed bytes as a row limit counts them, the disk tier's RAM part (keys, index) and its
        calls' temporaries included, rounded up like tombstones so the limit steps down once per
        many demotions."""
        fixed = reserved_fixed_bytes(self.table.state, budget)
        tier = self.table.tier
        if tier is not None:
            step = max(1, budget // EVICT_SLACK)
            params = self.table.state.rows.cols["params"]
            calls = min(budget // MAX_CALL_SHARE,
                        int(self.call_keys * (params.shape[1] * params.itemsize + CALL_BYTES_PER_KEY)))
            fixed += -(-(tier.ram_bytes() + calls) // step) * step
        return fixed

    def shape(self) -> tuple[int, float]:
        """(fixed bytes, bytes a row takes in the store and the index): what splits a shard's budget."""
        with self.table.lock.mutex:
            st = self.table.state
            return fixed_bytes(st), st.rows.row_nbytes() + SLOT_BYTES / hashmap.MAX_LOAD

    def set_shard_share(self, max_bytes: int | None) -> None:
        """This table's share of its shard's ``max_bytes`` (:func:`tables.budget.split_shard_budget`)."""
        with self.table.lock.mutex:
            old, self.shard_share = self.shard_share, max_bytes
            try:
                self.fit(self.row_limit(self.table.config))
            except BaseException:
                self.shard_share = old
                raise

    def make_room(self, uniq: np.ndarray, rows: np.ndarray, new: np.ndarray, *,
                  count_refused: bool = True) -> tuple[np.ndarray, int | None]:
        """Under the lock, before ``new`` (indices into ``uniq``) get rows: evict the coldest
        rows, never one of ``uniq``'s (evict mode; ``rows`` is looked up again after each
        eviction, which moves rows) and/or keep only the new ids that fit.
        Returns the new ids that get RAM rows (a prefix of ``new``) and the row limit their
        growth is capped at; the others are counted refused unless ``count_refused`` is False
        (the caller places them elsewhere and counts what it cannot)."""
        budget, _ = self.in_force()
        if budget is None:
            return new, None
        t = self.table
        st, cfg = t.state, t.config.eviction
        row_bytes = st.rows.row_nbytes()
        limit = rows_within(budget, row_bytes, self._fixed(budget))
        m = new.shape[0]
        tier = t.tier
        if tier is not None and t.lock.snapshot is not None and st.rows.n + m > limit:
            return new, None  # rows must not move: RAM holds them past its budget until the save ends
        if (st.rows.n + m > limit and (cfg.over_budget == "evict" or tier is not None) and t.lock.snapshot is None
                and tombstone_bytes(st) < budget // TOMBSTONE_SHARE):
            # Free a slack beyond this push's need, so the partial sort runs once per many pushes.
            slack = limit - int(limit * tier.low_water) if tier is not None else limit // EVICT_SLACK
            want = st.rows.n + m - limit + slack
            for _ in range(4):  # again when the evictions' tombstones lowered the limit
                if not self._evict_coldest(want, protected=rows[rows >= 0]):
                    break
                # an eviction fills its holes with the last rows: the push's rows are found again
                hashmap.lookup(st.slots, st.rows.cols["keys"], st.hash_key, uniq, rows)
                limit = rows_within(budget, row_bytes, self._fixed(budget))
                want = st.rows.n + m - limit
                if want <= 0:
                    break
        take = max(0, min(m, limit - st.rows.n))
        if take < m:
            if count_refused:
                t.counters["refused_by_budget"] += m - take
            new = new[:take]
        self.fit(max(limit, st.rows.n + take))
        return new, limit

    def _evict_coldest(self, count: int, *, protected: np.ndarray) -> int:
        """Evict the ``count`` coldest rows, never ``protected`` ones, or move them to the disk
        tier when the table has one and it takes them; returns how many went."""
        t = self.table
        if t.tier is not None:
            moved = t.tier.demote_coldest(count, protected=protected)
            if moved or t.config.eviction.over_budget == "refuse":
                return moved
        st = t.state
        n = st.rows.n
        cols = st.rows.cols
        victims = eviction.coldest(t.config.eviction, count, show=cols["show"][:n], click=cols["click"][:n],
                                   last_seen=cols["last_seen"][:n], current_pass=st.pass_id,
                                   decay=t.config.show_click_decay, protected=protected)
        if victims.shape[0] == 0:
            return 0
        mask = np.zeros(n, np.bool_)
        mask[victims] = True
        gone = cols["keys"][:n][mask].copy()
        st.remove(mask)
        self.keep_tombstones(gone)
        t.counters["evicted_by_budget"] += int(victims.shape[0])
        return int(victims.shape[0])

    def keep_tombstones(self, gone: np.ndarray) -> None:
        """Record evicted ids for the next delta saves; with no save chain and no save under
        way no delta owes them (the next save is a base), so none is kept."""
        st = self.table.state
        if st.cursors or self.table.lock.one_save.locked():
            st.add_tombstones(gone, np.full(gone.shape[0], st.epoch, np.uint32))
