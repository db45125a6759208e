"""Moving a sparse table's rows between its RAM tier and its disk tier (:mod:`tables.disk_tier`).

Demotion: when a push's new ids or a promotion need room the RAM byte budget does not have
(:class:`tables.byte_budget.TableBudget`), the coldest RAM rows (the eviction score, never a
row the same call uses) move to disk, down to ``tier.low_water`` of the budget's rows, in one
batch. Promotion: a pull reads disk rows from their records in place and promotes only those
read a second time lately (:mod:`tables.promotion`); a push updates its disk rows on disk
(optimizer, counts, last seen and the change epoch a delta save selects by), a chunk of
records at a time, written to the records the disk tier's write head hands out, and moves
nothing into RAM, so only reads earn a row its way there. While a
save reads the records (they must keep its consistent point) a push promotes its disk rows
instead. The demotion that makes room for promoted rows comes first, then
their records are read and freed a chunk at a time, so what a batch holds in RAM beside the
budget stays small. A push with more new ids than RAM holds rows even emptied creates the
rest on disk (:meth:`TableTier.create`), updated as in RAM, so none is refused while the disk
has room; the disk index a push grows counts in the RAM budget, so RAM then settles under its
lowered row limit. A load places a save's rows a chunk at a time the same way: RAM takes
them up to its row limit, then demotes its coldest (loaded rows among them) before taking
more, and a base sizes the disk index first for the rows RAM will have no room for. A disk tier at
``max_bytes`` evicts its own coldest rows (tombstones as for RAM evictions), never the records
a promotion is about to read; a disk that
refuses to grow is :class:`core.errors.DiskFull`, counted in ``disk_full``, and the demotion
falls back to what the RAM budget does without a tier (evict or refuse), so RAM keeps serving.
Everything here runs under the table lock; rows never move while a save's snapshot is open
(it holds the disk records it reads, :meth:`DiskTier.hold`), so demotion waits for its end.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np

from core.errors import DiskFull
from tables import eviction, promotion
from tables.dedupe import dedupe
from tables.disk_tier import BUFFER_RECORDS, DiskTier
from tables.promotion import SecondRead
from tables.rows import MOVE_CHUNK

if TYPE_CHECKING:
    from tables.table_config import TableConfig
    from tables.table_lock import TableLock
    from tables.table_state import TableState

log = logging.getLogger(__name__)

PULL_CHUNK = 1 << 13  # keys of a pull missing from RAM handled at a time (its temporaries are this size)
COUNTERS = ("ram_hits", "disk_hits", "promoted", "demoted", "disk_reads", "disk_evicted", "disk_full",
            "updated_on_disk", "created_on_disk")


class RowUpdate(Protocol):
    """A push's update of rows ``rows`` of columns ``cols`` with their summed gradients,
    shows and clicks (the table's optimizer and counts)."""

    def __call__(self, cols: dict[str, np.ndarray], rows: np.ndarray, grads: np.ndarray, shows: np.ndarray,
                 clicks: np.ndarray) -> None: ...


class _Budget(Protocol):
    def in_force(self) -> tuple[int | None, str]: ...
    def ram_row_limit(self) -> int | None: ...
    def fit(self, limit: int | None) -> None: ...
    def keep_tombstones(self, gone: np.ndarray) -> None: ...


class TieredTable(Protocol):
    """What the tier reads and changes (:class:`tables.sparse_table.SparseTable` is one)."""

    name: str
    config: TableConfig
    counters: dict[str, int]
    state: TableState
    lock: TableLock
    budget: _Budget


class TableTier:
    """The disk tier of ``table`` (its config's ``tier``) and the moves between the tiers."""

    def __init__(self, table: TieredTable) -> None:
        cfg = table.config.tier
        assert cfg is not None
        self.table = table
        self.low_water = cfg.low_water
        self.disk = DiskTier(Path(cfg.disk.path), table.name, table.state.rows.widths, cfg.disk.max_bytes,
                             table.state.hash_key)
        budget = table.budget.in_force()[0]
        self.second_read = SecondRead(table.state.hash_key, promotion.slots_for(budget))
        table.counters.update(dict.fromkeys(COUNTERS, 0))

    # ------------------------------------------------------------- promotion
    def promote(self, keys: np.ndarray, *, protected: np.ndarray, limit: int | None,
                at: np.ndarray | None = None) -> int:
        """Move the rows of ``keys`` (unique, none in RAM) found on disk into RAM; returns how
        many. ``limit``: the RAM row limit (None: no budget); ``at``: the keys' records, when
        the caller looked them up."""
        t = self.table
        st = t.state
        if at is None:
            at = self.disk.lookup(keys)
        on_disk, records = keys[at >= 0], at[at >= 0]  # a demotion leaves these records as they are
        m = int(on_disk.shape[0])
        if m == 0:
            return 0
        if limit is not None and st.rows.n + m > limit:
            if t.lock.snapshot is None:
                self.demote_coldest(st.rows.n + m - int(limit * self.low_water), protected=protected,
                                    keep=records)
                t.budget.fit(limit)
            else:
                limit = None  # rows must not move: RAM holds them past its budget until the save ends
        st.reserve(st.rows.n + m, limit)
        got = 0
        for start in range(0, m, BUFFER_RECORDS):  # whole records in RAM a copy buffer at a time
            cols = self.disk.take(on_disk[start : start + BUFFER_RECORDS], at=records[start : start + BUFFER_RECORDS])
            st.upsert(cols)
            got += int(cols["keys"].shape[0])
        for name in ("disk_hits", "disk_reads", "promoted"):
            t.counters[name] += got
        return got

    def push(self, keys: np.ndarray, absent: np.ndarray, grads: np.ndarray, shows: np.ndarray,
             clicks: np.ndarray, update: RowUpdate) -> np.ndarray:
        """Update the disk rows of ``keys[absent]`` (unique keys; ``absent``: those not in RAM)
        on disk, without promoting them: ``update`` runs on a copy buffer of whole records at a
        time, read into RAM and written back to disk (:meth:`DiskTier.rewrite`), with the rows
        of ``grads``, ``shows`` and ``clicks`` (aligned with ``keys``) of that chunk alone.
        Returns the indices into ``keys`` of those found on disk. The caller checked that no
        save reads the records (:attr:`DiskTier.holds`)."""
        t = self.table
        hits = []
        for start in range(0, absent.shape[0], BUFFER_RECORDS):  # a copy buffer of keys at a time
            part = absent[start : start + BUFFER_RECORDS]
            at = self.disk.lookup(keys[part])
            found = at >= 0
            if not found.any():
                continue
            order = np.argsort(at[found], kind="stable")
            records, hit = at[found][order], part[found][order]
            cols = self.disk.read(records)
            update(cols, np.arange(hit.shape[0], dtype=np.int64), grads[hit], shows[hit], clicks[hit])
            self.disk.rewrite(records, cols)
            hits.append(hit)
        hit = np.concatenate(hits) if hits else np.empty(0, np.int64)
        for name in ("disk_hits", "disk_reads", "updated_on_disk"):
            t.counters[name] += int(hit.shape[0])
        return hit

    def pull(self, keys: np.ndarray, rows: np.ndarray, out: np.ndarray) -> np.ndarray:
        """Keys of a pull absent from RAM (``rows`` -1) and on disk: those read a second time
        lately or more than once in this pull are promoted (:mod:`tables.promotion`), the
        others' rows copied into ``out`` from their records' params and left on disk.
        Returns the positions of the keys in neither tier. The missing keys go
        ``PULL_CHUNK`` at a time, so a pull's temporaries stay small beside the RAM budget; a
        key repeated across two parts is marked by the first and earns its promotion in the
        second, as one repeated within a part does."""
        t = self.table
        self.second_read.resize(promotion.slots_for(t.budget.in_force()[0]))  # a shard's share may change
        miss = np.flatnonzero(rows < 0)
        absent = []
        promoted = False
        for start in range(0, miss.shape[0], PULL_CHUNK):
            gone, moved = self._pull_part(keys, miss[start : start + PULL_CHUNK], out, recheck=promoted)
            absent.append(gone)
            promoted |= moved
        return np.concatenate(absent) if len(absent) != 1 else absent[0]

    def _pull_part(self, keys: np.ndarray, miss: np.ndarray, out: np.ndarray, *,
                   recheck: bool) -> tuple[np.ndarray, bool]:
        """:meth:`pull` of the keys at positions ``miss``; ``recheck``: an earlier part
        promoted rows, so RAM may now hold some of these keys. Returns the positions of the
        keys in neither tier and whether it promoted any."""
        t = self.table
        uniq, inv = dedupe(keys[miss])
        at = self.disk.lookup(uniq)
        on_disk = at >= 0
        maybe = np.flatnonzero(on_disk)
        repeated = np.bincount(inv, minlength=uniq.shape[0])[maybe] > 1
        earned = np.zeros(uniq.shape[0], np.bool_)
        earned[maybe] = self.second_read.earned(uniq[maybe], repeated)
        in_place = on_disk & ~earned
        sel = np.flatnonzero(in_place[inv])  # miss positions of the keys read in place
        self.disk.read_params(at[inv[sel]], miss[sel], out)
        n = int(np.count_nonzero(in_place))
        t.counters["disk_hits"] += n
        t.counters["disk_reads"] += n
        found = in_place
        if recheck:  # before this part's promotion, whose demotion may move them again
            self._copy_from_ram(keys, miss, inv, ~on_disk, out, found)
        moved = bool(earned.any())
        if moved:
            self.promote(uniq[earned], protected=np.empty(0, np.int64), limit=t.budget.ram_row_limit(),
                         at=at[earned])
            self._copy_from_ram(keys, miss, inv, earned, out, found)
        return miss[~found[inv]], moved

    def _copy_from_ram(self, keys: np.ndarray, miss: np.ndarray, inv: np.ndarray, which: np.ndarray,
                       out: np.ndarray, found: np.ndarray) -> None:
        """Rows of the keys ``which`` (a mask over the part's unique keys, ``inv`` of positions
        ``miss``) that RAM holds, into ``out``; marks them ``found``."""
        st = self.table.state
        pos = miss[which[inv]]
        now = st.lookup(keys[pos])
        out[pos[now >= 0]] = st.rows.cols["params"][now[now >= 0]]
        found[inv[which[inv]][now >= 0]] = True

    # -------------------------------------------------------------- demotion
    def demote_coldest(self, count: int, *, protected: np.ndarray, keep: np.ndarray | None = None) -> int:
        """Move the ``count`` coldest RAM rows (never ``protected`` ones) to disk, evicting from
        it, if it is full, none of records ``keep``; returns how many moved (0 while a snapshot
        is open or when the disk is full)."""
        t = self.table
        st = t.state
        if count <= 0 or t.lock.snapshot is not None:
            return 0
        n = st.rows.n
        cols = st.rows.cols
        victims = eviction.coldest(t.config.eviction, count, show=cols["show"][:n], click=cols["click"][:n],
                                   last_seen=cols["last_seen"][:n], current_pass=st.pass_id,
                                   decay=t.config.show_click_decay, protected=protected)
        return self.demote(victims, keep=keep)

    def demote(self, victims: np.ndarray, *, keep: np.ndarray | None = None) -> int:
        """Move RAM rows ``victims`` to disk; returns how many moved: fewer (counted) when the disk is full."""
        t = self.table
        st = t.state
        m = int(victims.shape[0])
        if m == 0:
            return 0
        self._make_disk_room(m, keep)
        victims = victims[: self.disk.room()]  # a disk tier smaller than the batch takes what it holds
        m = int(victims.shape[0])
        mask = np.zeros(st.rows.n, np.bool_)
        for start in range(0, m, MOVE_CHUNK):
            part = victims[start : start + MOVE_CHUNK]
            try:
                self.disk.put(st.rows.cols, part)
            except DiskFull as e:
                t.counters["disk_full"] += 1
                log.warning("table %s: %s; rows stay in RAM under its budget's rule", t.name, e)
                break
            mask[part] = True
        m = int(mask.sum())
        if m == 0:
            return 0
        st.remove(mask)
        t.counters["demoted"] += m
        return m

    def create(self, cols: dict[str, np.ndarray]) -> int:
        """Whole new rows (every row store column, keys in neither tier) onto disk: those RAM's
        budget has no room for even emptied. Returns how many went: all, or none when the disk
        tier cannot hold them (full of rows it may not evict, or a disk that refuses to grow)."""
        t = self.table
        m = int(cols["keys"].shape[0])
        self._make_disk_room(m, None)
        if self.disk.room() < m:
            return 0
        try:
            self.disk.put(cols)
        except DiskFull as e:
            t.counters["disk_full"] += 1
            log.warning("table %s: %s; %d new rows refused", t.name, e, m)
            return 0
        t.counters["created_on_disk"] += m
        return m

    def settle(self) -> None:
        """Demote RAM rows beyond the budget's row limit (after a load, or rows created on
        disk), down to the low water."""
        t = self.table
        for _ in range(4):  # again when the demotion grew the disk index, which lowers the limit
            limit = t.budget.ram_row_limit()
            n = t.state.rows.n
            if limit is None or n <= limit:
                return
            if not self.demote_coldest(n - int(limit * self.low_water), protected=np.empty(0, np.int64)):
                return
            t.budget.fit(t.budget.ram_row_limit())

    def _make_disk_room(self, m: int, keep: np.ndarray | None) -> None:
        """Evict the coldest disk rows when fewer than ``m`` records are free (the disk budget),
        never those of records ``keep`` (a promotion's, about to be read)."""
        d = self.disk
        short = m - d.room()
        if short <= 0:
            return
        t = self.table
        at = d.live_records()
        scores = d.read(at, eviction.SCORE_COLUMNS)
        kept = np.flatnonzero(np.isin(at, keep)) if keep is not None else np.empty(0, np.int64)
        cold = eviction.coldest(t.config.eviction, short, show=scores["show"], click=scores["click"],
                                last_seen=scores["last_seen"], current_pass=t.state.pass_id,
                                decay=t.config.show_click_decay, protected=kept)
        keys = self.drop(cold, at)
        t.budget.keep_tombstones(keys)
        t.counters["disk_evicted"] += int(keys.shape[0])

    # --------------------------------------------------------- whole tables
    def load_rows(self, cols: dict[str, np.ndarray]) -> None:
        """Whole rows a load read (a chunk of a save, unique keys): each replaces its id's row
        in whichever tier holds it; RAM takes the others while its budget's row limit has room
        and, when it has none, first demotes its coldest rows (the just-loaded ones among
        them) down to the low water, so RAM holds the hottest rows and never more than its
        budget. A disk that refuses them leaves the rest to RAM, as the budget's rule decides."""
        t = self.table
        st = t.state
        keys = cols["keys"]
        if self.disk.rows:  # a delta's row replaces a disk row: the new row is placed as a new one
            at = self.disk.lookup(keys)
            self.disk.free(at[at >= 0], keys[at >= 0])
        known = st.lookup(keys) >= 0
        if known.any():
            st.upsert({name: col[known] for name, col in cols.items()})  # in place: RAM does not grow
        new = np.flatnonzero(~known)
        done = 0
        while done < new.shape[0]:
            left = new.shape[0] - done
            limit = t.budget.ram_row_limit()
            room = left if limit is None else limit - st.rows.n
            if room <= 0:
                if st.rows.n and self.demote_coldest(st.rows.n - int(limit * self.low_water),
                                                     protected=np.empty(0, np.int64)):
                    t.budget.fit(t.budget.ram_row_limit())  # the disk index grew: the store gives back what it costs
                    continue
                room, limit = left, None  # the disk refused (or a budget too small for any row)
            part = new[done : done + min(room, left, MOVE_CHUNK)]
            st.reserve(st.rows.n + part.shape[0], limit)
            st.upsert({name: col[part] for name, col in cols.items()})
            done += part.shape[0]

    def expect_rows(self, rows: int) -> None:
        """A load of ``rows`` new rows is coming: the disk index is sized now for those RAM
        will have no room for, so it does not double inside a demotion while RAM is full, and
        the store gives back what the limit left then has no room for."""
        budget = self.table.budget
        limit = budget.ram_row_limit()
        if limit is not None:
            over = self.table.state.rows.n + rows - int(limit * self.low_water)
            self.disk.reserve_index(self.disk.rows + max(0, over))
            budget.fit(budget.ram_row_limit())

    def remove_keys(self, keys: np.ndarray) -> None:
        """Forget the disk rows of those ``keys`` that have one (a delta's tombstones)."""
        at = self.disk.lookup(keys)
        self.disk.free(at[at >= 0], keys[at >= 0])

    def drop(self, which: np.ndarray, at: np.ndarray) -> np.ndarray:
        """Forget the disk rows ``at[which]`` (a mask or indices: shrink, the disk budget);
        returns their keys."""
        gone = at[which]
        keys = self.disk.read(gone, ("keys",))["keys"]
        self.disk.free(gone, keys)
        return keys

    def lookup(self, keys: np.ndarray) -> np.ndarray:
        return self.disk.lookup(keys)

    def stats(self) -> dict[str, int]:
        d = self.disk
        return {"disk_rows": d.rows, "disk_bytes": d.file_bytes(), "disk_max_bytes": d.max_records * d.record_bytes,
                "disk_index_bytes": self.ram_bytes()}

    def ram_bytes(self) -> int:
        """What the tier holds in RAM: the disk index (:meth:`DiskTier.ram_bytes`) and the marks
        of first reads."""
        return self.disk.ram_bytes() + self.second_read.nbytes

    def close(self) -> None:
        self.disk.close()
