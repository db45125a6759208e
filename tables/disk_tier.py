"""The disk tier of a sparse table: the rows RAM's byte budget has no room for.

Each row lives in exactly one tier. A row on disk is a fixed-size record of a file: its
payload (``params``, ``state``, ``wide_state`` float32, in that order) at ``record * record
bytes``. Its small columns (key, show, click, last_seen, created, mod_epoch) stay in RAM,
indexed by record number beside a ``live`` flag, with the numba hash index
(:mod:`tables.hashmap`) from key to record: a lookup never touches the disk, and eviction
and delta saves pick disk rows without reading them. Records are copied by numba kernels in
batches (one call per batch, never per key).

The file is mapped into memory and grown with ``posix_fallocate`` before any record past
its end is written: a full disk is an ``OSError`` at growth (:class:`core.errors.DiskFull`),
never a SIGBUS on a write through the map. After every batch the pages it touched are
dropped from the process (``MADV_DONTNEED``; the page cache keeps them), so the tier costs
RSS only for its small columns and index. ``max_bytes`` caps the file: a full tier evicts
its coldest rows (by the table's eviction score) to take new ones.

The file is scratch, not a save: saves write disk rows like RAM rows
(:mod:`tables.table_files`) and every tier starts a file of its own, empty (named by process
and a counter, so shards and scratch tables on one machine never share one); files left by a
process that died are removed by the next tier opened for that table in that directory. While a save reads records
(:meth:`hold`), records freed meanwhile are not reused, so what it reads is what the
consistent point held. Callers hold the table lock.
"""

from __future__ import annotations

import errno
import fcntl
import itertools
import mmap
import os
import re
import weakref
from pathlib import Path

import numpy as np

from core.errors import DISK_FULL_ERRNOS, ConfigError, DiskFull
from core.kernel_cache import JIT, kernel
from tables import hashmap
from tables.rows import COLUMN_DTYPES

PAYLOAD = ("params", "state", "wide_state")  # the columns a record holds, in order
META = tuple(name for name in COLUMN_DTYPES if name not in PAYLOAD)  # the columns kept in RAM
GROW_RECORDS = 1 << 16  # the file grows by at least this many records (or an eighth) at a time
_opened = itertools.count()  # tiers this process opened: one file each, even for one table


def _new_file(directory: Path, table: str) -> tuple[Path, int]:
    """A fresh, locked file for ``table``'s tier in ``directory``, after removing the files of
    tiers whose process is gone (a crash leaves them; nobody holds their lock)."""
    directory.mkdir(parents=True, exist_ok=True)
    mine = re.compile(re.escape(table) + r"\.\d+-\d+\.tier")
    for old in directory.iterdir():
        if mine.fullmatch(old.name):
            _remove_if_unowned(old)
    path = directory / f"{table}.{os.getpid()}-{next(_opened)}.tier"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return path, fd


def _remove_if_unowned(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        path.unlink(missing_ok=True)
    except BlockingIOError:
        pass  # a live tier's
    finally:
        os.close(fd)


def _remove(path: Path, fd: int) -> None:
    path.unlink(missing_ok=True)
    os.close(fd)


@kernel(**JIT)
def _read_records(recs: np.ndarray, at: np.ndarray, params: np.ndarray, state: np.ndarray,
                  wide_state: np.ndarray) -> None:
    w, s = params.shape[1], state.shape[1]
    for i in range(at.shape[0]):
        r = recs[at[i]]
        params[i] = r[:w]
        state[i] = r[w : w + s]
        wide_state[i] = r[w + s :]


@kernel(**JIT)
def _write_records(recs: np.ndarray, at: np.ndarray, params: np.ndarray, state: np.ndarray,
                   wide_state: np.ndarray) -> None:
    w, s = params.shape[1], state.shape[1]
    for i in range(at.shape[0]):
        r = recs[at[i]]
        r[:w] = params[i]
        r[w : w + s] = state[i]
        r[w + s :] = wide_state[i]


class DiskTier:
    """``table``'s rows on disk, in a file of its own in ``directory`` (created empty, removed
    when the tier closes), at most ``max_bytes`` of records of the ``widths`` payload columns;
    keys hashed under ``hash_key``."""

    def __init__(self, directory: Path, table: str, widths: dict[str, int], max_bytes: int,
                 hash_key: np.ndarray) -> None:
        self.widths = {name: widths.get(name, 0) for name in PAYLOAD}
        self.record_floats = sum(self.widths.values())
        self.record_bytes = 4 * self.record_floats
        self.max_records = max_bytes // self.record_bytes
        if self.max_records < 1:
            raise ConfigError(f"table {table}: tier.disk.max_bytes = {max_bytes} cannot hold one "
                              f"{self.record_bytes}-byte row", detail={"keys": ["tier.disk.max_bytes"]})
        self.hash_key = hash_key
        self.path, self._fd = _new_file(directory, table)
        self._closer = weakref.finalize(self, _remove, self.path, self._fd)
        self._map: mmap.mmap | None = None
        self._recs = np.empty((0, self.record_floats), np.float32)
        self.meta: dict[str, np.ndarray] = {name: np.empty(0, COLUMN_DTYPES[name]) for name in META}
        self.live = np.zeros(0, np.bool_)
        self.slots = np.zeros(hashmap.slots_for(16), np.uint64)
        self.high = 0  # records ever handed out: records 0..high-1 are live or free
        self.rows = 0
        self._free = np.empty(0, np.int64)  # records to hand out again
        self._held: list[np.ndarray] = []  # records freed while a save reads the file
        self.holds = 0

    # ----------------------------------------------------------------- reads
    def lookup(self, keys: np.ndarray) -> np.ndarray:
        """Record of each key (-1 when not on disk)."""
        out = np.empty(keys.shape[0], np.int64)
        if self.rows:
            hashmap.lookup(self.slots, self.meta["keys"], self.hash_key, keys, out)
        else:
            out.fill(-1)
        return out

    def read(self, records: np.ndarray) -> dict[str, np.ndarray]:
        """Every column of ``records``' rows (a row store's columns, in its order)."""
        m = records.shape[0]
        cols = {name: np.empty((m, w), np.float32) for name, w in self.widths.items()}
        if m:
            _read_records(self._recs, records, cols["params"], cols["state"], cols["wide_state"])
            self._drop_pages()
        for name in META:
            cols[name] = self.meta[name][records]
        return {name: cols[name] for name in COLUMN_DTYPES}

    def live_records(self) -> np.ndarray:
        return np.flatnonzero(self.live[: self.high])

    def file_bytes(self) -> int:
        return self._recs.shape[0] * self.record_bytes

    def ram_bytes(self) -> int:
        """What the tier holds in RAM: its small columns, live flags, index and free list."""
        return (sum(c.nbytes for c in self.meta.values()) + self.live.nbytes + self.slots.nbytes
                + self._free.nbytes + sum(h.nbytes for h in self._held))

    # ---------------------------------------------------------------- writes
    def room(self) -> int:
        """Rows the tier can take without evicting."""
        return int(self._free.shape[0]) + self.max_records - self.high

    def put(self, cols: dict[str, np.ndarray]) -> None:
        """Write rows (every row store column, keys not on disk) into free records; the
        caller made room (:meth:`room`). :class:`DiskFull` when the file cannot grow: then
        nothing was written."""
        m = cols["keys"].shape[0]
        if m == 0:
            return
        reuse = min(m, int(self._free.shape[0]))
        fresh = m - reuse
        if fresh:
            self._grow(self.high + fresh)
        at = np.empty(m, np.int64)
        at[:reuse] = self._free[self._free.shape[0] - reuse :]
        self._free = self._free[: self._free.shape[0] - reuse]
        at[reuse:] = np.arange(self.high, self.high + fresh)
        self.high += fresh
        _write_records(self._recs, at, cols["params"], cols["state"], cols["wide_state"])
        self._drop_pages()
        for name in META:
            self.meta[name][at] = cols[name]
        self.live[at] = True
        self.rows += m
        if self.rows > self.slots.shape[0] * hashmap.MAX_LOAD:
            self.slots = np.zeros(hashmap.slots_for(self.rows), np.uint64)
            hashmap.insert(self.slots, self.meta["keys"], self.hash_key, self.live_records())
        else:
            hashmap.insert(self.slots, self.meta["keys"], self.hash_key, at)

    def free(self, records: np.ndarray) -> None:
        """Forget the rows of ``records`` (promoted or evicted); their records are handed
        out again once no save reads the file."""
        if records.shape[0] == 0:
            return
        hashmap.delete(self.slots, self.meta["keys"], self.hash_key, self.meta["keys"][records].copy())
        self.live[records] = False
        self.rows -= int(records.shape[0])
        if self.holds:
            self._held.append(records.copy())
        else:
            self._free = np.concatenate([self._free, records])

    def clear(self) -> None:
        """No rows; the file keeps its size (its records are handed out again)."""
        self.live[:] = False
        self.slots = np.zeros(hashmap.slots_for(16), np.uint64)
        self.rows = 0
        self._held = []
        self._free = np.arange(self.high - 1, -1, -1, dtype=np.int64)

    def hold(self) -> None:
        """A save reads records from now until :meth:`release`: freed ones wait."""
        self.holds += 1

    def release(self) -> None:
        self.holds -= 1
        if self.holds == 0 and self._held:
            self._free = np.concatenate([self._free, *self._held])
            self._held = []

    def close(self) -> None:
        self._recs = np.empty((0, self.record_floats), np.float32)
        if self._map is not None:
            self._map.close()
            self._map = None
        self._closer()

    # -------------------------------------------------------------- plumbing
    def _grow(self, records: int) -> None:
        """Room in the file and the small columns for ``records`` records."""
        have = self._recs.shape[0]
        if records > have:
            want = min(self.max_records, max(records, have + max(GROW_RECORDS, have // 8)))
            try:
                os.posix_fallocate(self._fd, have * self.record_bytes, (want - have) * self.record_bytes)
            except OSError as e:
                if e.errno not in DISK_FULL_ERRNOS and e.errno != errno.EFBIG:
                    raise
                want = records  # no room for a step ahead: only what this batch needs, else DiskFull
                try:
                    os.posix_fallocate(self._fd, have * self.record_bytes, (want - have) * self.record_bytes)
                except OSError as again:
                    if again.errno not in DISK_FULL_ERRNOS and again.errno != errno.EFBIG:
                        raise
                    os.ftruncate(self._fd, have * self.record_bytes)  # give back what a failed call allocated
                    raise DiskFull(f"disk tier {self.path}: no room to grow to {want * self.record_bytes} bytes "
                                   f"({os.strerror(again.errno)})", detail={"path": str(self.path)}) from again
            self._recs = np.empty((0, self.record_floats), np.float32)
            if self._map is not None:
                self._map.close()
            self._map = mmap.mmap(self._fd, want * self.record_bytes)
            self._recs = np.frombuffer(self._map, np.float32).reshape(want, self.record_floats)
        cap = self.live.shape[0]
        if records > cap:
            cap = max(records, cap + max(1024, cap // 16))  # little slack: these columns count in the RAM budget
            for name, col in self.meta.items():
                grown = np.empty(cap, col.dtype)
                grown[: self.high] = col[: self.high]
                self.meta[name] = grown
            live = np.zeros(cap, np.bool_)
            live[: self.high] = self.live[: self.high]
            self.live = live

    def _drop_pages(self) -> None:
        if self._map is not None:
            self._map.madvise(mmap.MADV_DONTNEED)
