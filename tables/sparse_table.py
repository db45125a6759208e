"""The sparse table: uint64 ids -> float32 rows, updated by a server-side optimizer.

Public verbs: ``pull``, ``push``, ``contains``, ``size``, ``stats``, ``end_pass``,
``shrink``, ``save``, ``load``. Every verb is thread-safe and atomic for its keys (one
lock; the numba kernels release the GIL). Row layout: ``[wide weight,] embedding``.

Pull never creates rows: an absent id reads as its deterministic initializer row. Push
sums the gradients of duplicate keys, asks the admission policy about unknown ids, and
applies one optimizer update per row. A byte budget (``eviction.max_bytes``, or the
table's share of its shard's, :mod:`tables.budget`) is enforced when push creates rows:
new ids are refused, or the coldest rows evicted, once no new row fits. While a save's
snapshot is open (rows must not move) an evict-mode table refuses instead of evicting. With
a ``tier`` the rows over the budget move to a disk tier instead and come back when pulled
twice lately (a pull reads them in place, a push updates them on disk, :mod:`tables.tiering`);
every verb sees both tiers. See :mod:`tables.snapshot` for
how saves avoid stalling pushes and :mod:`tables.table_files` for the file format.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import numpy as np

from core.errors import InvalidInput, NonFiniteGradient
from core.yaml_config import validate_config
from tables import eviction, hashmap
from tables.admission import DEFAULT_SKETCH_SHARE, carry_over, check_sketch_memory, make_admission
from tables.batch_checks import as_counts, as_keys, as_matrix
from tables.budget import table_bytes
from tables.byte_budget import TableBudget
from tables.change_log import ChangeLog
from tables.dedupe import dedupe, sum_rows, sum_values
from tables.finite import finite_rows
from tables.initializers import KIND_CODES, WIDE_SEED_SALT, fill_rows
from tables.optimizers import Optimizer
from tables.row_kernels import gather, touch
from tables.rows import RowStore
from tables.table_config import EvictionConfig, TableConfig
from tables.table_files import TableSave, load_table
from tables.table_lock import TableLock
from tables.table_merge import TablePart, load_parts
from tables.table_state import TableState
from tables.tiering import TableTier

_U64 = np.dtype(np.uint64)
_KEY_SCAN_ROWS = 1 << 16


class SparseTable:
    """``state`` is everything the table holds (:class:`~tables.table_state.TableState`),
    read and changed under ``lock.mutex``; ``counters`` count calls and outcomes.
    ``sketch_share``: the most of the machine's memory its admission sketches may take."""

    def __init__(self, config: TableConfig, *, sketch_share: float = DEFAULT_SKETCH_SHARE) -> None:
        check_sketch_memory(config.admission, table=config.name, share=sketch_share)
        self.sketch_share = sketch_share
        self.config = config
        self.configured = config  # a restore tells a redeployed config's policy from a runtime change by it
        self.name = config.name
        self.width = config.width
        self.dim = config.dim
        self._c0 = 1 if config.wide else 0
        self._opt = Optimizer(config.optimizer, config.dim)
        self._wopt = Optimizer(config.wide_optimizer, 1) if config.wide else None
        widths = {"params": self.width, "state": self._opt.state_width,
                  "wide_state": self._wopt.state_width if self._wopt else 0}
        self.state = TableState.empty(widths, config.initial_capacity, make_admission(config.admission, config.seed))
        self.lock = TableLock()
        self.changes = ChangeLog()  # changed keys for live readers; free until one reads it
        self.counters: dict[str, int] = dict.fromkeys(
            ("pulls", "pulled_keys", "rejected_pulls", "pushes", "pushed_keys", "evicted", "nonfinite_rejected",
             "nonfinite_skipped", "not_admitted", "refused_by_budget", "evicted_by_budget"), 0)
        self.tier: TableTier | None = None
        self.budget = TableBudget(self)
        self.budget.fit(self.budget.row_limit(config))
        if config.tier is not None:
            self.tier = TableTier(self)
        ic, wc = config.initializer, config.wide_initializer
        self._init_args = (np.uint64(config.seed), KIND_CODES[ic.kind], np.float32(ic.scale),
                           np.uint64(config.seed ^ WIDE_SEED_SALT), KIND_CODES[wc.kind], np.float32(wc.scale))
        self._gather_args = (self._c0, self.dim, *self._init_args)  # gather's constant tail, built once

    # ----------------------------------------------------------------- reads
    def pull(self, keys: Any, *, out: np.ndarray | None = None) -> np.ndarray:
        """Rows of ``keys`` (n, width) in input order; absent ids read as their initializer row.
        ``out``: a C-contiguous float32 (n, width) array to write them into (a reply frame's)."""
        # a 1-d uint64 array (the wire's keys) skips as_keys' conversions: this is a small pull's hot path
        if type(keys) is np.ndarray and keys.dtype == _U64 and keys.ndim == 1:
            k = np.ascontiguousarray(keys)
        else:
            k = as_keys(keys, table=self.name)
        n = k.shape[0]
        if out is None:
            out = np.empty((n, self.width), np.float32)
        elif out.dtype != np.float32 or out.shape != (n, self.width) or not out.flags.c_contiguous:
            raise InvalidInput(f"table {self.name}: out must be C-contiguous float32 ({n}, {self.width}), "
                               f"got {out.dtype} {out.shape}")
        counters = self.counters
        with self.lock.mutex:
            st = self.state
            cols = st.rows.cols
            rows = np.empty(n, np.int64)
            missing = gather(st.slots, cols["keys"], st.hash_key, cols["params"], k, out, rows, self.tier is None,
                             *self._gather_args)
            if self.tier is not None:
                self.budget.note_call(n)
                counters["ram_hits"] += n - missing
                if missing:
                    absent = self.tier.pull(k, rows, out)
                    self._fill_initial(k[absent], absent, out)
                    missing = absent.shape[0]
            counters["pulls"] += 1
            counters["pulled_keys"] += n
            if missing:
                counters["rejected_pulls"] += missing
        return out

    def pull_existing(self, keys: Any) -> tuple[np.ndarray, np.ndarray]:
        """Stored rows only, for serving: ``(rows, found)``; absent ids read as zeros and are
        reported in ``found``, never invented (no initializer row, no counters touched)."""
        k = as_keys(keys, table=self.name)
        out = np.zeros((k.shape[0], self.width), np.float32)
        with self.lock.mutex:
            rows = self.state.lookup(k)
            found = rows >= 0
            out[found] = self.state.rows.cols["params"][rows[found]]
            if self.tier is not None and not found.all():
                at = self.tier.lookup(k)
                on_disk = at >= 0
                out[on_disk] = self.tier.disk.read(at[on_disk])["params"]
                found |= on_disk
        return out, found

    def counts(self, keys: Any) -> tuple[np.ndarray, np.ndarray]:
        """Decayed ``(show, click)`` counts of ``keys`` as of the current pass (the values eviction
        scores); zeros for absent ids. Serving ranks items by them when it knows nothing else."""
        k = as_keys(keys, table=self.name)
        show = np.zeros(k.shape[0], np.float32)
        click = np.zeros(k.shape[0], np.float32)
        with self.lock.mutex:
            st = self.state
            rows = st.lookup(k)
            found = rows >= 0
            sources = [(found, {name: st.rows.cols[name][rows[found]] for name in eviction.SCORE_COLUMNS})]
            if self.tier is not None:
                at = self.tier.lookup(k)
                sources.append((at >= 0, self.tier.disk.read(at[at >= 0], eviction.SCORE_COLUMNS)))
            for found, cols in sources:
                seen = cols["last_seen"]
                show[found] = eviction.decayed(cols["show"], seen, st.pass_id, self.config.show_click_decay)
                click[found] = eviction.decayed(cols["click"], seen, st.pass_id, self.config.show_click_decay)
        return show, click

    def contains(self, keys: Any) -> np.ndarray:
        """Boolean mask: which ids have a row (in either tier)."""
        k = as_keys(keys, table=self.name)
        with self.lock.mutex:
            found = self.state.lookup(k) >= 0
            if self.tier is not None:
                found |= self.tier.lookup(k) >= 0
            return found

    def lookup_rows(self, keys: np.ndarray) -> np.ndarray:
        """RAM row number of each id (uint64 array), -1 when absent from RAM."""
        with self.lock.mutex:
            return self.state.lookup(keys)

    def stored_keys(self, limit: int, *, top_byte: int | None = None) -> np.ndarray:
        """Up to ``limit`` ids that have a row, oldest rows first; with ``top_byte`` only ids whose
        top byte it is (one slot's ids: logrecords.hashing). Real ids to show, as in the API's examples."""
        out: list[np.ndarray] = []
        found = 0
        with self.lock.mutex:
            n, keys = self.state.rows.n, self.state.rows.cols["keys"]
            for start in range(0, n, _KEY_SCAN_ROWS):  # a chunk at a time: no copy of a large table's keys
                chunk = keys[start : min(n, start + _KEY_SCAN_ROWS)]
                if top_byte is not None:
                    chunk = chunk[(chunk >> np.uint64(56)) == np.uint64(top_byte)]
                out.append(chunk[: limit - found].copy())
                found += out[-1].shape[0]
                if found >= limit:
                    break
        return np.concatenate(out) if out else np.empty(0, np.uint64)

    def size(self) -> int:
        """Rows in both tiers."""
        return self.state.rows.n + (self.tier.disk.rows if self.tier is not None else 0)

    def __len__(self) -> int:
        return self.size()

    @property
    def current_pass(self) -> int:
        return self.state.pass_id

    def stats(self) -> dict[str, Any]:
        with self.lock.mutex:
            st, adm = self.state, self.state.admission
            return {
                "table": self.name, "rows": st.rows.n, "dim": self.dim, "width": self.width, "pass": st.pass_id,
                "epoch": st.epoch, "capacity_rows": st.rows.capacity, "index_slots": st.slots.shape[0],
                "row_bytes": st.rows.row_nbytes(),
                "bytes": table_bytes(st), "used_bytes": st.rows.used_nbytes(),
                "max_bytes": self.budget.in_force()[0],
                "over_budget": self.config.eviction.over_budget,
                "admitted": adm.admitted, "pending_estimate": adm.pending_estimate,
                "admission_bytes": adm.memory_bytes(), "tombstones": int(st.tomb_keys.shape[0]),
                **(self.tier.stats() if self.tier is not None else {}),
                **self.counters,
            }

    # ---------------------------------------------------------------- writes
    def push(self, keys: Any, grads: Any, shows: Any = None, clicks: Any = None, *,
             received_at: float | None = None, unique: bool = False) -> None:
        """Apply gradients; duplicates are summed first. Unknown ids go through admission:
        admitted ones get a row (initializer values) and then the update; others are only
        counted. NaN/Inf rows are refused (the whole push) or skipped, per config.
        ``received_at``: when the records behind this push were received, for the changed-keys
        log (default: now). ``unique``: the caller says ``keys`` has no repeats, so the dedupe
        pass is skipped. A promise broken is never corruption: repeated new ids are found
        (they alone are checked) and the push then dedupes as without the flag; a repeated
        stored id gets one update per occurrence instead of one for their sum."""
        k = as_keys(keys, table=self.name)
        n = k.shape[0]
        g = as_matrix(grads, n, self.width, name="grads", table=self.name)
        s = as_counts(shows, n, name="shows", table=self.name, default=1.0)
        c = as_counts(clicks, n, name="clicks", table=self.name, default=0.0)
        finite = np.empty(n, np.bool_)
        bad = finite_rows(g, s, c, finite)
        if bad:
            first = int(np.argmin(finite))
            if self.config.nonfinite == "reject":
                with self.lock.mutex:
                    self.counters["nonfinite_rejected"] += bad
                raise NonFiniteGradient(
                    f"table {self.name}: {bad} of {n} gradient rows hold NaN or Inf (first at index {first}); "
                    "push refused, table unchanged", detail={"bad_rows": bad, "first_index": first})
            k, g, s, c = k[finite], g[finite], s[finite], c[finite]
            with self.lock.mutex:
                self.counters["nonfinite_skipped"] += bad
        uniq = k
        if not unique:
            uniq, g, s, c = _summed_by_key(k, g, s, c)
        with self.lock.mutex:
            st = self.state
            rows = np.empty(uniq.shape[0], np.int64)
            missing = hashmap.lookup(st.slots, st.rows.cols["keys"], st.hash_key, uniq, rows)
            if missing and unique and dedupe(uniq[rows < 0])[0].shape[0] < missing:
                # repeated new ids: each would get a row of its own (one id indexed twice)
                uniq, g, s, c = _summed_by_key(k, g, s, c)
                rows = np.empty(uniq.shape[0], np.int64)
                missing = hashmap.lookup(st.slots, st.rows.cols["keys"], st.hash_key, uniq, rows)
            on_disk = None  # keys whose disk rows this push updated (or created) on disk
            if self.tier is not None:
                self.budget.note_call(n)
                self.counters["ram_hits"] += uniq.shape[0] - missing
                if missing and self.tier.disk.holds == 0 and self.tier.disk.rows:
                    hit = self.tier.push(uniq, np.flatnonzero(rows < 0), g, s, c, self._update)
                    if hit.shape[0]:
                        rest = np.ones(uniq.shape[0], np.bool_)
                        rest[hit] = False
                        on_disk = uniq[hit]
                        uniq, rows, g, s, c = uniq[rest], rows[rest], g[rest], s[rest], c[rest]
                        missing -= int(hit.shape[0])
                elif missing and self.tier.promote(uniq[rows < 0], protected=rows[rows >= 0],
                                                   limit=self.budget.ram_row_limit()):
                    missing = hashmap.lookup(st.slots, st.rows.cols["keys"], st.hash_key, uniq, rows)
            if missing:
                miss = np.flatnonzero(rows < 0)
                admitted = st.admission.admit(uniq[miss], s[miss], c[miss])
                new = miss[admitted]
                self.counters["not_admitted"] += int(miss.shape[0] - new.shape[0])
                if new.shape[0]:
                    wanted = new
                    new, limit = self.budget.make_room(uniq, rows, new, count_refused=self.tier is None)
                    if new.shape[0]:
                        rows[new] = self._create(uniq[new], limit)
                    if self.tier is not None and new.shape[0] < wanted.shape[0]:  # RAM has no room even emptied
                        over = wanted[new.shape[0] :]
                        born = self._create_on_disk(uniq[over], g[over], s[over], c[over])
                        self.counters["refused_by_budget"] += over.shape[0] - born.shape[0]
                        if born.shape[0]:
                            made = uniq[over[born]]
                            on_disk = made if on_disk is None else np.concatenate([on_disk, made])
                keep = rows >= 0
                if not keep.all():
                    rows, g, s, c = rows[keep], g[keep], s[keep], c[keep]
                    if self.changes.active:
                        uniq = uniq[keep]
            self._apply(rows, g, s, c)
            if on_disk is not None:  # the disk index may have grown: RAM's row limit may now be below its rows
                self.tier.settle()
            if on_disk is not None and self.changes.active:
                uniq = np.concatenate([on_disk, uniq])
            self.changes.record(uniq, now=received_at)
            self.counters["pushes"] += 1
            self.counters["pushed_keys"] += n

    def _apply(self, rows: np.ndarray, g: np.ndarray, s: np.ndarray, c: np.ndarray) -> None:
        store = self.state.rows
        if self.lock.snapshot is not None:
            self.lock.snapshot.protect(store, rows)
        self._update(store.cols, rows, g, s, c)

    def _update(self, cols: dict[str, np.ndarray], rows: np.ndarray, g: np.ndarray, s: np.ndarray,
                c: np.ndarray) -> None:
        """One push's update of ``rows`` of ``cols`` (the RAM store's, or disk records read
        into RAM): the optimizers, then show/click and the change epoch."""
        if self._wopt is not None:
            self._wopt.apply(cols["params"], cols["wide_state"], rows, g, 0)
        self._opt.apply(cols["params"], cols["state"], rows, g, self._c0)
        touch(cols["show"], cols["click"], cols["last_seen"], cols["mod_epoch"], rows, s, c, self.state.pass_id,
              np.uint32(self.state.epoch), np.float32(self.config.show_click_decay))

    def budget_shape(self) -> tuple[int, float]:
        """(fixed bytes, bytes per row): what splits a shard's ``max_bytes`` (:mod:`tables.byte_budget`)."""
        return self.budget.shape()

    def set_shard_budget(self, max_bytes: int | None) -> None:
        """This table's share of its shard's ``max_bytes``; the smaller of it and
        ``eviction.max_bytes`` is enforced."""
        self.budget.set_shard_share(max_bytes)

    def _fill_initial(self, keys: np.ndarray, at: np.ndarray, out: np.ndarray) -> None:
        """The initializer rows of ``keys`` into rows ``at`` of ``out``."""
        if keys.shape[0] == 0:
            return
        seed, kind, scale, wseed, wkind, wscale = self._init_args
        if self._wopt is not None:
            fill_rows(out, at, 0, 1, keys, wseed, wkind, wscale)
        fill_rows(out, at, self._c0, self.dim, keys, seed, kind, scale)

    def _create(self, keys: np.ndarray, limit: int | None = None) -> np.ndarray:
        """Append rows for absent ``keys`` with initializer values; returns their row numbers.
        The store grows by doubling, capped at ``limit`` rows (the byte budget's)."""
        st = self.state
        n0, m = st.rows.n, keys.shape[0]
        st.reserve(n0 + m, limit)
        new = np.arange(n0, n0 + m, dtype=np.int64)
        self._initial_rows(st.rows.cols, new, keys)
        st.rows.n = n0 + m
        hashmap.insert(st.slots, st.rows.cols["keys"], st.hash_key, new)
        return new

    def _initial_rows(self, cols: dict[str, np.ndarray], new: np.ndarray, keys: np.ndarray) -> None:
        """Rows ``new`` (consecutive) of ``cols``: ``keys``' rows as created, initializer values
        and fresh optimizer state."""
        n0, m = int(new[0]), new.shape[0]
        st = self.state
        cols["keys"][n0 : n0 + m] = keys
        seed, kind, scale, wseed, wkind, wscale = self._init_args
        if self._wopt is not None:
            fill_rows(cols["params"], new, 0, 1, keys, wseed, wkind, wscale)
            self._wopt.init_state(cols["params"], cols["wide_state"], new, 0)
        fill_rows(cols["params"], new, self._c0, self.dim, keys, seed, kind, scale)
        self._opt.init_state(cols["params"], cols["state"], new, self._c0)
        cols["show"][n0 : n0 + m] = 0.0
        cols["click"][n0 : n0 + m] = 0.0
        cols["last_seen"][n0 : n0 + m] = st.pass_id
        cols["created"][n0 : n0 + m] = st.pass_id
        cols["mod_epoch"][n0 : n0 + m] = st.epoch

    def _create_on_disk(self, keys: np.ndarray, g: np.ndarray, s: np.ndarray, c: np.ndarray) -> np.ndarray:
        """Rows for new ``keys`` that RAM's budget has no room for (a push with more new ids
        than RAM holds rows), created, updated with ``g``, ``s``, ``c`` and written to the disk
        tier, so their learning is kept as a demoted row's is. Returns the indices into ``keys``
        of those written: none while a save holds the records or when the disk is full."""
        assert self.tier is not None
        if self.lock.snapshot is not None or self.tier.disk.holds:
            return np.empty(0, np.int64)
        m = keys.shape[0]
        store = RowStore(self.state.rows.widths, m)
        new = np.arange(m, dtype=np.int64)
        self._initial_rows(store.cols, new, keys)
        store.n = m
        self._update(store.cols, new, g, s, c)
        return new[: self.tier.create(store.cols)]

    # ------------------------------------------------------------- lifecycle
    def end_pass(self) -> int:
        """Close the current pass; show/click decay lazily (see :mod:`tables.eviction`)."""
        with self.lock.mutex:
            self.state.pass_id += 1
            return self.state.pass_id

    def policy_config(self, *, admission: Any = None, eviction: Any = None) -> TableConfig:
        """This table's config with new admission/eviction settings, validated, not applied
        (sketches over this table's share of the machine's memory are refused, naming the keys)."""
        data = self.config.model_dump()
        for key, value in (("admission", admission), ("eviction", eviction)):
            if value is not None:
                data[key] = value.model_dump() if hasattr(value, "model_dump") else value
        new = validate_config(data, TableConfig, f"table {self.name} policy")
        if new.admission != self.config.admission:
            check_sketch_memory(new.admission, table=self.name, share=self.sketch_share)
        return new

    def set_policy(self, *, admission: Any = None, eviction: Any = None) -> TableConfig:
        """Change admission and/or eviction settings of a live table (dicts or config models);
        returns the new config. Pending admission counts carry over when the policy keeps its
        kind and sketch shape; otherwise they start again. Saves record the effective policy
        and a restore adopts it."""
        new = self.policy_config(admission=admission, eviction=eviction)
        with self.lock.mutex:
            fresh = make_admission(new.admission, new.seed) if new.admission != self.config.admission else None
            limit = self.budget.row_limit(new, fresh)  # a budget too small for one row is refused, nothing changed
            if fresh is not None:
                carry_over(self.state.admission, fresh)
                self.state.admission = fresh
            self.config = new
            self.budget.fit(limit)
        return new

    def shrink(self, *, policy: EvictionConfig | None = None, dry_run: bool = False) -> int:
        """Evict the rows the eviction rules select; returns how many (would) go. Evicted
        ids become tombstones for the next delta save and behave like never-seen ids."""
        cfg = policy or self.config.eviction
        with self.lock.mutex:
            self.lock.wait_idle()
            st = self.state
            n = st.rows.n
            cols = st.rows.cols
            at = self.tier.disk.live_records() if self.tier is not None else np.empty(0, np.int64)
            disk = (self.tier.disk.read(at, eviction.SCORE_COLUMNS) if self.tier is not None
                    else {name: cols[name][:0] for name in eviction.SCORE_COLUMNS})
            mask = eviction.select(cfg, show=np.concatenate([cols["show"][:n], disk["show"]]),
                                   click=np.concatenate([cols["click"][:n], disk["click"]]),
                                   last_seen=np.concatenate([cols["last_seen"][:n], disk["last_seen"]]),
                                   current_pass=st.pass_id, decay=self.config.show_click_decay)
            count = int(mask.sum())
            if dry_run or count == 0:
                return count
            gone = cols["keys"][:n][mask[:n]].copy()
            st.remove(mask[:n])
            if self.tier is not None:
                gone = np.concatenate([gone, self.tier.drop(mask[n:], at)])
            self.budget.keep_tombstones(gone)
            self.counters["evicted"] += count
            return count

    # ------------------------------------------------------------ persistence
    def save(self, path: str | Path, mode: Literal["base", "delta"] = "base", cursor: str = "checkpoint") -> dict:
        """Write a base (all rows) or a delta (rows changed since this cursor's last save, plus
        tombstones) into directory ``path``; returns the manifest."""
        return self.begin_save(path, mode, cursor).write()

    def begin_save(self, path: str | Path, mode: Literal["base", "delta"] = "base",
                   cursor: str = "checkpoint") -> TableSave:
        """Take a save's consistent point now (cheap for a base: copy-on-write); the returned
        :class:`TableSave` writes it with ``write()`` (or gives it up with ``abort()``) while
        pushes go on. One save at a time: a second waits until the first is written."""
        return TableSave(self, Path(path), mode=mode, cursor=cursor)

    def load(self, path: str | Path) -> dict:
        """Apply a saved base (replaces everything) or delta (must follow the previous save of
        its chain). Everything is verified first: on a bad save the table is unchanged. The
        budget in force afterwards (the saved policy's) gives back the capacity beyond it.
        A tiered table's RAM takes the rows up to its budget, the coldest going to disk as
        they come (:meth:`TableTier.load_rows`): RAM never holds more than the budget, and a
        disk write failing midway (not a full disk: RAM then takes the rest) leaves a part loaded."""
        manifest = load_table(self, Path(path))
        self._loaded()
        return manifest

    def load_parts(self, parts: list[TablePart]) -> None:
        """Become the union of rows other tables gave (:mod:`tables.table_merge`): a shard count
        that changed, each new shard made of the rows now placed on it from every old shard."""
        with self.lock.mutex:
            self.lock.wait_idle()
            if self.tier is not None:
                self.tier.disk.clear()  # the parts are every row of the table
            load_parts(self, parts)
            if self.tier is not None:
                self.tier.settle()
            self._loaded()

    def _loaded(self) -> None:
        with self.lock.mutex:
            self.budget.fit_loaded()
            self.changes.restart()  # live readers start over: the rows went back to a save


def _summed_by_key(k: np.ndarray, g: np.ndarray, s: np.ndarray,
                   c: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The unique keys (first-seen order) and their gradient rows, shows and clicks summed."""
    uniq, inv = dedupe(k)
    m = uniq.shape[0]
    if m == k.shape[0]:  # no repeats: the gradient rows as given (read only), no batch-sized copy
        return uniq, g, sum_values(s, inv, m), sum_values(c, inv, m)
    return uniq, sum_rows(g, inv, m), sum_values(s, inv, m), sum_values(c, inv, m)
