"""Keyed fixed-width uint64 rows: a per-user ring of recent item ids, an item's feature ids.

An id-rows table is a :class:`~tables.sparse_table.SparseTable` whose float32 ``params``
column holds ``2 * words`` float32 per row that are read and written only as ``words``
uint64 (the bits, never the values). So it is indexed, snapshotted, saved (base and delta on
any cursor), loaded, budgeted, shrunk (eviction by last write, like pushes) and exported by
the very code every other table runs. It takes no gradients: its writes are
``append`` (ring rows, :mod:`tables.id_rows_kernels`) and ``put`` (whole rows); ``read``
returns stored rows, zeros for absent keys. Tables of this kind are named ``ids.<name>`` so
a shard knows their kind from a save (:mod:`ps.shard_id_rows`).

With a ``tier`` (:mod:`tables.tiering`) the rows RAM's budget has no room for live on disk: a
read takes them from their records in place, and a write first promotes the disk rows of its
keys (a ring append or a rate update reads the row it changes), so the kernels only ever see
RAM rows; a write of more distinct keys than RAM holds rows goes in groups of keys that fit.

A third write, ``observe_rates``, keeps rate rows: per key the moving average of the steps
between its occurrences (a streaming item-frequency estimate that every trainer updates, Yi
et al. 2019, on the parameter servers as the paper has it). Its step clock is the row of key
:data:`RATE_CLOCK_KEY`, so it is saved and restored with the rows it times.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import numpy as np

from core.errors import Conflict, InvalidInput
from tables.batch_checks import as_keys
from tables.id_rows_kernels import put_rows, rate_expected, rate_observe, ring_append
from tables.row_kernels import touch
from tables.sparse_table import SparseTable
from tables.table_config import EvictionConfig, TableConfig, TierConfig
from tables.table_files import TableSave

ID_ROWS_PREFIX = "ids."
MAX_WORDS = 256  # TableConfig.dim <= 512 float32
RATE_WORDS = 2  # a rate row: [last step + 1, gap float32 | weight float32]
RATE_CLOCK_KEY = 0  # the rate rows' clock: the steps observed so far (no key observed may be 0)


def is_id_rows(name: str) -> bool:
    return name.startswith(ID_ROWS_PREFIX)


def id_rows_config(name: str, words: int, *, ttl_passes: int | None = None,
                   tier: TierConfig | None = None) -> TableConfig:
    """The table config of id-rows table ``name`` (``ids.`` prefixed) of ``words`` uint64 a row;
    ``ttl_passes``: rows not written for more passes go at the next shrink; ``tier``: a disk
    tier under the RAM budget (None: RAM only)."""
    if not is_id_rows(name):
        raise InvalidInput(f"id-rows table names start with {ID_ROWS_PREFIX!r}, got {name!r}")
    if not 1 <= words <= MAX_WORDS:
        raise InvalidInput(f"id-rows table {name!r}: words must be in 1..{MAX_WORDS}, got {words}")
    return TableConfig(name=name, dim=2 * words, initializer={"kind": "zeros"}, optimizer={"kind": "sgd", "lr": 1.0},
                       eviction=EvictionConfig(ttl_passes=ttl_passes, budget_order="lru"), tier=tier)


class IdRowsTable(SparseTable):
    def __init__(self, config: TableConfig) -> None:
        super().__init__(config)
        self.words = config.dim // 2
        self.counters.update(appends=0, appended=0, puts=0, put_rows=0, rate_steps=0)

    def _words(self) -> np.ndarray:
        return self.state.rows.cols["params"].view(np.uint64)

    # ---------------------------------------------------------------- reads
    def read(self, keys: Any) -> tuple[np.ndarray, np.ndarray]:
        """``(rows uint64 (n, words), found)``: stored rows, zeros for absent keys."""
        k = as_keys(keys, table=self.name)
        out = np.zeros((k.shape[0], self.words), np.uint64)
        with self.lock.mutex:
            rows = self.state.lookup(k)
            found = rows >= 0
            out[found] = self._words()[rows[found]]
            if self.tier is not None:
                miss = np.flatnonzero(rows < 0)
                self.counters["ram_hits"] += k.shape[0] - miss.shape[0]
                at = self.tier.lookup(k[miss])
                on_disk = miss[at >= 0]
                out[on_disk] = self._disk_words(at[at >= 0])
                found[on_disk] = True
                self.counters["disk_hits"] += on_disk.shape[0]
                self.counters["disk_reads"] += on_disk.shape[0]
        return out, found

    # ---------------------------------------------------------------- writes
    def append(self, keys: Any, ids: Any, time_bits: Any) -> None:
        """Append entry ``(ids[i], time_bits[i])`` to the ring row of ``keys[i]``, in input order
        (each key's entries oldest first); a key without a row gets one."""
        k = as_keys(keys, table=self.name)
        ids, tb = _u64(ids, k.shape[0], "ids", self.name), _u64(time_bits, k.shape[0], "time_bits", self.name)
        with self.lock.mutex:
            for part in self._key_groups(k):
                rows = self._rows_for(k[part])
                ring_append(self._words(), rows, ids[part], tb[part])
            self.counters["appends"] += 1
            self.counters["appended"] += k.shape[0]

    def put(self, keys: Any, values: Any) -> None:
        """Replace the rows of ``keys`` by ``values`` (uint64 (n, words)); the last of repeated keys wins."""
        k = as_keys(keys, table=self.name)
        v = np.ascontiguousarray(values)
        if v.dtype != np.uint64 or v.shape != (k.shape[0], self.words):
            raise InvalidInput(f"table {self.name}: values must be uint64 ({k.shape[0]}, {self.words}), "
                               f"got {v.dtype} {v.shape}")
        with self.lock.mutex:
            for part in self._key_groups(k):
                rows = self._rows_for(k[part])
                put_rows(self._words(), rows, v[part])
            self.counters["puts"] += 1
            self.counters["put_rows"] += k.shape[0]

    def observe_rates(self, observed: Any, query: Any, alpha: float, *, observe: bool = True) -> np.ndarray:
        """Rate rows (:data:`RATE_WORDS` words): count one step in which the keys ``observed``
        occurred (repeats count; ``observe=False``: none, the clock unchanged), then return the
        expected occurrences per step of each of ``query`` (float32; a key never observed: once
        in all the steps so far)."""
        if self.words != RATE_WORDS:
            raise InvalidInput(f"table {self.name}: rate rows are {RATE_WORDS} words, this table's are {self.words}")
        if not 0.0 < alpha <= 1.0:
            raise InvalidInput(f"table {self.name}: alpha must be in (0, 1], got {alpha}")
        seen, asked = as_keys(observed, table=self.name), as_keys(query, table=self.name)
        if (seen == RATE_CLOCK_KEY).any() or (asked == RATE_CLOCK_KEY).any():
            raise InvalidInput(f"table {self.name}: key {RATE_CLOCK_KEY} is the rate rows' clock, not a key to observe")
        out = np.empty(asked.shape[0], np.float32)
        with self.lock.mutex:
            if observe:
                # the clock's row made with the keys' (the smallest key, so first to get room): a row
                # made, promoted or evicted for one of them cannot move it before the kernel runs
                rows = self._rows_for(np.concatenate([np.array([RATE_CLOCK_KEY], np.uint64), seen]))
                if rows[0] < 0:
                    raise Conflict(f"table {self.name}: the shard's byte budget has no room for the rate rows' clock")
                # read after the rows are made (a table that grew has new arrays)
                rate_observe(self._words(), self.state.rows.cols["params"], rows[1:], np.int64(rows[0]),
                             np.float32(alpha))
                self.counters["rate_steps"] += 1
            words, floats = self._words(), self.state.rows.cols["params"]
            clock_row = np.int64(self.state.lookup(np.array([RATE_CLOCK_KEY], np.uint64))[0])
            rows = self.state.lookup(asked)
            if self.tier is None or self.tier.disk.rows == 0:
                rate_expected(words, floats, rows, clock_row, out)
            else:
                self._expected_both_tiers(asked, rows, clock_row, out)
        return out

    def _expected_both_tiers(self, asked: np.ndarray, rows: np.ndarray, clock_row: np.int64, out: np.ndarray) -> None:
        """Under the lock: :func:`rate_expected` of ``asked`` (RAM rows ``rows``) when some of
        them, or the clock, are on disk: their rows and the clock's are gathered from either
        tier into one small array first, so asking never moves a row."""
        floats = self.state.rows.cols["params"]
        gathered = np.zeros((asked.shape[0] + 1, floats.shape[1]), np.float32)  # the last row: the clock's
        ram = rows >= 0
        gathered[:-1][ram] = floats[rows[ram]]
        at = self.tier.lookup(asked)
        on_disk = at >= 0
        if on_disk.any():
            gathered[:-1][on_disk] = self.tier.disk.read(at[on_disk], ("params",))["params"]
        local = np.where(ram | on_disk, np.arange(asked.shape[0], dtype=np.int64), -1)
        if clock_row >= 0:
            gathered[-1] = floats[clock_row]
        else:
            clock_at = self.tier.lookup(np.array([RATE_CLOCK_KEY], np.uint64))
            if clock_at[0] >= 0:
                gathered[-1] = self.tier.disk.read(clock_at, ("params",))["params"][0]
        rate_expected(gathered.view(np.uint64), gathered, local, np.int64(asked.shape[0]), out)

    def _disk_words(self, records: np.ndarray) -> np.ndarray:
        """The rows of disk ``records`` as their uint64 words (the float32 params' bits)."""
        return self.tier.disk.read(records, ("params",))["params"].view(np.uint64)

    def _key_groups(self, keys: np.ndarray) -> list[Any]:
        """Under the lock: the positions of a write's ``keys`` to write at a time. With a tier,
        a write of more distinct keys than RAM holds rows goes in groups of keys that fit
        (half the row limit), every position of a key in one group, in input order, so each
        group's rows are made in RAM (the earlier groups' demoted) and none is refused; else
        all at once."""
        limit = self.budget.ram_row_limit() if self.tier is not None else None
        if limit is None or keys.shape[0] <= limit // 2:
            return [slice(None)]
        _, inv = np.unique(keys, return_inverse=True)
        size = max(1, limit // 2)
        group = inv.reshape(-1) // size
        if not group.any():  # the keys repeat: few distinct
            return [slice(None)]
        order = np.argsort(group, kind="stable")
        return np.split(order, np.searchsorted(group[order], np.arange(1, int(group.max()) + 1)))

    def _rows_for(self, keys: np.ndarray) -> np.ndarray:
        """Under the lock: the row of each key (created when absent, -1 when the byte budget refuses
        it), its pre-image kept for an open save, its last write stamped (eviction, deltas)."""
        uniq, inv = np.unique(keys, return_inverse=True)
        st = self.state
        rows = st.lookup(uniq)
        miss = np.flatnonzero(rows < 0)
        if (miss.shape[0] and self.tier is not None and self.tier.disk.rows
                and self.tier.promote(uniq[miss], protected=rows[rows >= 0], limit=self.budget.ram_row_limit())):
            rows = st.lookup(uniq)  # the promotion's demotion moved RAM rows
            miss = np.flatnonzero(rows < 0)
        if miss.shape[0]:
            new, limit = self.budget.make_room(uniq, rows, miss)
            if new.shape[0]:
                rows[new] = self._create(uniq[new], limit)
        kept = rows[rows >= 0]
        if self.lock.snapshot is not None:
            self.lock.snapshot.protect(st.rows, kept)
        cols = st.rows.cols
        ones = np.ones(kept.shape[0], np.float32)
        touch(cols["show"], cols["click"], cols["last_seen"], cols["mod_epoch"], kept, ones, np.zeros_like(ones),
              st.pass_id, np.uint32(st.epoch), np.float32(self.config.show_click_decay))
        return rows[inv.reshape(-1)]

    def push(self, keys: Any, grads: Any, shows: Any = None, clicks: Any = None) -> None:
        raise InvalidInput(f"table {self.name} holds ids, not embeddings: write it with append or put, not push")

    # ------------------------------------------------------------ persistence
    def begin_save(self, path: str | Path, mode: Literal["base", "delta"] = "base",
                   cursor: str = "checkpoint") -> TableSave:
        # made on first write, maybe after its shard's last base: its first save on a cursor is a base
        with self.lock.mutex:
            if mode == "delta" and cursor not in self.state.cursors:
                mode = "base"
        return super().begin_save(path, mode, cursor)


def _u64(values: Any, n: int, what: str, table: str) -> np.ndarray:
    a = np.ascontiguousarray(values)
    if a.dtype != np.uint64 or a.shape != (n,):
        raise InvalidInput(f"table {table}: {what} must be uint64 ({n},), got {a.dtype} {a.shape}")
    return a


def time_bits(times: np.ndarray) -> np.ndarray:
    """float64 seconds as the uint64 words a ring row stores."""
    return np.ascontiguousarray(times, np.float64).view(np.uint64)
