"""The disk tier of a sparse table: the rows RAM's byte budget has no room for.

Each row lives in exactly one tier. A row on disk is a fixed-size record of a file holding
every column of the row, packed in the row store's order (the key first, then ``params``,
``state``, ``wide_state``, show, click, last_seen, created, mod_epoch) at ``record *
record_bytes``. RAM keeps only the index from key to record (:mod:`tables.disk_index`, its
slots alone), a free list and each call's bounded copy buffer (``BUFFER_RECORDS``), so a disk
row costs RAM its index slots only (the mapped file's pages are page cache, outside the
budget). Records are read from a shared mapping of the file and written by ``pwrite`` (long
runs of consecutive records) or through the mapping (scattered ones), both in numba kernels
(:mod:`tables.record_io`), never one Python call per key; eviction, TTL and delta saves read
the columns they need from the records the same way. A record is a whole number of 8-byte
words (padded), which the mapped reads copy.

The file is grown with ``posix_fallocate`` before any record past its end is written: a full
disk is an ``OSError`` at growth (:class:`core.errors.DiskFull`), never a failed write of a
record. ``max_bytes`` caps the file: a full tier evicts its coldest rows (by the table's
eviction score) to take new ones. A demotion's rows go past the last record, in one run, while
the records freed by promotions are few (a random write per record costs several times a
sequential one's share), and into the lowest freed ones once they are many.

The file is scratch, not a save: saves write disk rows like RAM rows
(:mod:`tables.table_files`) and every tier starts a file of its own, empty (named by process
and a counter, so shards and scratch tables on one machine never share one); files left by a
process that died are removed by the next tier opened for that table in that directory. While
a save reads records (:meth:`hold`), records freed meanwhile are not reused and records are
never changed in place (a push's update in place, :meth:`rewrite`, waits for no save: its
rows are promoted instead), so what it reads is what the consistent point held. Callers hold
the table lock.
"""

from __future__ import annotations

import errno
import fcntl
import itertools
import os
import re
import weakref
from pathlib import Path

import numpy as np

from core.errors import DISK_FULL_ERRNOS, ConfigError, DiskFull
from tables import disk_index, hashmap
from tables.record_io import MIN_RUN, WORD, RecordMap, gather, gather_field, scatter
from tables.rows import COLUMN_DTYPES, release_pages

PAYLOAD = ("params", "state", "wide_state")  # the float32 2-d columns
GROW_RECORDS = 1 << 16  # the file grows by at least this many records (or an eighth) at a time
BUFFER_RECORDS = 1 << 11  # records copied per kernel call: the bound of the tier's copy buffers (a batch's temporaries)
REHASH_SLOTS = 1 << 17  # index slots rehashed between two releases of the old index's pages
GROW_SOON = 0.9  # past this share of its load limit the index counts at its doubled size
HOLE_SHARE = 1 / 16  # freed records, as a share of the rows, past which a write fills them before growing the file
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
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)  # no readahead: a promotion reads one record, not its neighbours
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


def _remove(path: Path, fd: int, mapped: RecordMap) -> None:
    mapped.close()
    path.unlink(missing_ok=True)
    os.close(fd)



def record_dtype(widths: dict[str, int]) -> np.dtype:
    """One record: every row column, in the row store's order, packed, its size rounded up to
    whole 8-byte words (what a mapped read copies)."""
    packed = np.dtype([(name, dt, (widths.get(name, 0),)) if name in PAYLOAD else (name, dt)
                       for name, dt in COLUMN_DTYPES.items()])
    return np.dtype({"names": list(packed.names), "formats": [packed.fields[n][0] for n in packed.names],
                     "offsets": [packed.fields[n][1] for n in packed.names],
                     "itemsize": -(-packed.itemsize // WORD) * WORD})


class DiskTier:
    """``table``'s rows on disk, in a file of its own in ``directory`` (created empty, removed
    when the tier closes), at most ``max_bytes`` of records of the ``widths`` payload columns;
    keys hashed under ``hash_key``."""

    def __init__(self, directory: Path, table: str, widths: dict[str, int], max_bytes: int,
                 hash_key: np.ndarray) -> None:
        self.widths = {name: widths.get(name, 0) for name in PAYLOAD}
        self.dtype = record_dtype(self.widths)
        self.record_bytes = self.dtype.itemsize
        self.max_records = max_bytes // self.record_bytes
        if self.max_records < 1:
            raise ConfigError(f"table {table}: tier.disk.max_bytes = {max_bytes} cannot hold one "
                              f"{self.record_bytes}-byte row", detail={"keys": ["tier.disk.max_bytes"]})
        self.hash_key = hash_key
        self.path, self._fd = _new_file(directory, table)
        self._map = RecordMap(self._fd, self.max_records * self.record_bytes)
        self._closer = weakref.finalize(self, _remove, self.path, self._fd, self._map)
        self.file_records = 0  # records the file has room for
        self.slots = np.zeros(hashmap.slots_for(16), np.uint64)
        self.high = 0  # records ever handed out: records 0..high-1 are live or free
        self.rows = 0
        self._free = np.empty(0, np.int64)  # records to hand out again
        self._free_sorted = True  # whether _free is in descending order (its lowest records last)
        self._held: list[np.ndarray] = []  # records freed while a save reads the file
        self.holds = 0

    # ----------------------------------------------------------------- reads
    def lookup(self, keys: np.ndarray, *, verify: bool = True) -> np.ndarray:
        """Record of each key (-1 when not on disk); without ``verify``, a record that may hold
        another key whose tag agrees (:func:`tables.disk_index.lookup`)."""
        out = np.full(keys.shape[0], -1, np.int64)
        if self.rows:
            disk_index.lookup(self.slots, self.hash_key, keys, self._words(), self.record_bytes // WORD, out,
                              verify=verify)
        return out

    def take(self, keys: np.ndarray, *, at: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """The rows of ``keys`` (unique) found on disk, read and freed (a promotion): their
        columns. ``at``: their records, when the caller looked them up."""
        at, hit, cols = self._find(keys, tuple(COLUMN_DTYPES), at)
        self.free(at[hit], cols["keys"])
        return cols

    def peek(self, keys: np.ndarray, names: tuple[str, ...], *,
             at: np.ndarray | None = None) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """``(hit, cols)``: which of ``keys`` (unique) are on disk (indices into ``keys``) and
        columns ``names`` of their rows, read and left on disk. ``at``: their records by the
        index's tags alone (``lookup(keys, verify=False)``), when the caller has them."""
        _, hit, cols = self._find(keys, ("keys", *names) if "keys" not in names else names, at)
        return hit, cols

    def read_params(self, records: np.ndarray, rows: np.ndarray, out: np.ndarray) -> None:
        """Row ``rows[i]`` of ``out`` (float32, C-contiguous, the params' width) from the params
        of record ``records[i]`` (a live row's), copied from the mapping: a pull's rows read in
        place, with no copy of their whole records."""
        if records.shape[0]:
            floats = self._words().view(np.float32)
            gather_field(floats, records, self.record_bytes // 4, self.dtype.fields["params"][1] // 4, rows, out)

    def _find(self, keys: np.ndarray, names: tuple[str, ...],
              at: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
        """Records of ``keys``, which of them are on disk, and columns ``names`` (with "keys")
        of those: the index's tags pick records unread (or ``at``), the keys read with them
        check them."""
        if at is None:
            at = self.lookup(keys, verify=False)
        hit = np.flatnonzero(at >= 0)
        cols = self.read(at[hit], names)
        if not np.array_equal(cols["keys"], keys[hit]):  # another key's tag agreed: look up by reading keys
            at = self.lookup(keys)
            hit = np.flatnonzero(at >= 0)
            cols = self.read(at[hit], names)
        return at, hit, cols

    def read(self, records: np.ndarray, names: tuple[str, ...] = tuple(COLUMN_DTYPES)) -> dict[str, np.ndarray]:
        """Columns ``names`` (default: every column of a row store, in its order) of
        ``records``' rows, a copy buffer of whole records at a time."""
        m = records.shape[0]
        out = {name: np.empty((m, *self.dtype[name].shape), self.dtype[name].base) for name in names}
        buf = np.empty(min(m, BUFFER_RECORDS), self.dtype)
        for start in range(0, m, BUFFER_RECORDS):
            got = self._io(records[start : start + BUFFER_RECORDS], buf, write=False)
            for name in names:
                out[name][start : start + BUFFER_RECORDS] = got[name]
        return out

    def live_records(self) -> np.ndarray:
        return np.flatnonzero(disk_index.live(self.slots, self.high)) if self.rows else np.empty(0, np.int64)

    def file_bytes(self) -> int:
        return self.file_records * self.record_bytes

    def ram_bytes(self) -> int:
        """What the tier holds in RAM: its index and free list (a call's copy buffer is a
        temporary of the batch, like its other buffers). An index near its growth counts at
        the doubled size, so the RAM budget makes room before the larger index is made."""
        index = self.slots.nbytes
        if self.rows > GROW_SOON * hashmap.MAX_LOAD * self.slots.shape[0]:
            index *= 2
        return index + self._free.nbytes + sum(h.nbytes for h in self._held)

    # ---------------------------------------------------------------- writes
    def room(self) -> int:
        """Rows the tier can take without evicting."""
        return int(self._free.shape[0]) + self.max_records - self.high

    def put(self, cols: dict[str, np.ndarray], rows: np.ndarray | None = None) -> None:
        """Write rows (every row store column, keys not on disk; ``rows``: which of ``cols``'
        rows, default all, so a row store's columns are read in place, not copied) into free
        records; the caller made room (:meth:`room`). While freed records ("holes") are few (``HOLE_SHARE``
        of the rows) the rows go past the last record, in one run, else into the lowest holes;
        a file that cannot grow fills its holes. :class:`DiskFull` when the file cannot grow
        and the holes are too few: then nothing was written."""
        m = cols["keys"].shape[0] if rows is None else rows.shape[0]
        if m == 0:
            return
        holes = int(self._free.shape[0])
        if holes <= self.rows * HOLE_SHARE:  # few holes: append, one run of records (one write a buffer)
            fresh = min(m, self.max_records - self.high)
        else:
            fresh = max(0, m - holes)
        try:
            self._grow(self.high + fresh)
        except DiskFull:
            if holes < m:
                raise
            fresh = 0  # the file cannot grow: the holes take the rows
        reuse = m - fresh
        if reuse and not self._free_sorted:
            self._free = np.sort(self._free)[::-1]  # the lowest holes go first: neighbours make runs
            self._free_sorted = True
        at = np.empty(m, np.int64)
        at[:reuse] = self._free[holes - reuse :]
        at[reuse:] = np.arange(self.high, self.high + fresh)
        order = np.argsort(at, kind="stable")
        buf = np.empty(min(m, BUFFER_RECORDS), self.dtype)
        for start in range(0, m, BUFFER_RECORDS):
            part = order[start : start + BUFFER_RECORDS]
            src = part if rows is None else rows[part]
            for name in COLUMN_DTYPES:
                buf[name][: part.shape[0]] = cols[name][src]
            self._io(at[part], buf, write=True)
        self._free = self._free[: self._free.shape[0] - reuse]
        self.high += fresh
        self.rows += m
        if self.rows > self.slots.shape[0] * hashmap.MAX_LOAD:
            self._grow_index()
        disk_index.update(self.slots, self.hash_key, cols["keys"] if rows is None else cols["keys"][rows], at,
                          remove=False)

    def rewrite(self, records: np.ndarray, cols: dict[str, np.ndarray]) -> None:
        """Write the rows ``cols`` (every row store column, at most ``BUFFER_RECORDS``, keys
        unchanged) back into their own ``records`` (ascending, live, none held by a save): a
        push's update in place."""
        m = records.shape[0]
        if m == 0:
            return
        assert self.holds == 0 and m <= BUFFER_RECORDS, "a save reads these records, or too many at once"
        buf = np.empty(m, self.dtype)
        for name in COLUMN_DTYPES:
            buf[name] = cols[name]
        self._io(records, buf, write=True)

    def free(self, records: np.ndarray, keys: np.ndarray) -> None:
        """Forget the rows of ``records`` (promoted or evicted), whose keys are ``keys``; their
        records are handed out again once no save reads the file."""
        if records.shape[0] == 0:
            return
        disk_index.update(self.slots, self.hash_key, keys, records, remove=True)
        self.rows -= int(records.shape[0])
        if self.holds:
            self._held.append(records.copy())
        else:
            self._free = np.concatenate([self._free, records])
            self._free_sorted = False

    def clear(self) -> None:
        """No rows; the file keeps its size (its records are handed out again)."""
        self.slots = np.zeros(hashmap.slots_for(16), np.uint64)
        self.rows = 0
        self._held = []
        self._free = np.arange(self.high - 1, -1, -1, dtype=np.int64)
        self._free_sorted = True

    def hold(self) -> None:
        """A save reads records from now until :meth:`release`: freed ones wait."""
        self.holds += 1

    def release(self) -> None:
        self.holds -= 1
        if self.holds == 0 and self._held:
            self._free = np.concatenate([self._free, *self._held])
            self._free_sorted = False
            self._held = []

    def close(self) -> None:
        self._closer()

    # -------------------------------------------------------------- plumbing
    def reserve_index(self, rows: int) -> None:
        """An index that holds ``rows`` rows without growing (a load that knows how many rows
        it will demote grows it once, before RAM fills, not inside a demotion)."""
        if hashmap.slots_for(rows) > self.slots.shape[0]:
            self._grow_index(rows)

    def _grow_index(self, rows: int | None = None) -> None:
        """Rehash into an index for the rows (or ``rows``), giving the old one's pages back as
        it is read, so the two are never both whole in RAM."""
        grown = np.zeros(hashmap.slots_for(max(self.rows, rows or 0)), np.uint64)
        old = self.slots
        for start in range(0, old.shape[0], REHASH_SLOTS):
            disk_index.regrow(old[start : start + REHASH_SLOTS], grown)
            release_pages(old[start : start + REHASH_SLOTS])
        self.slots = grown

    def _words(self, *, writable: bool = False) -> np.ndarray:
        """The file's records as mapped words (a view for one call)."""
        return self._map.words(self.file_records * self.record_bytes, writable=writable)

    def _io(self, records: np.ndarray, buf: np.ndarray, *, write: bool) -> np.ndarray:
        """Records from (to, sorted) ``buf``'s first rows; returns those rows."""
        rows = buf[: records.shape[0]]
        if not write:
            gather(self._words(), records, rows.view(np.uint64).reshape(-1, self.record_bytes // WORD))
            return rows
        bad = scatter(self._fd, self._words(writable=True), records,
                      rows.view(np.uint64).reshape(-1, self.record_bytes // WORD), MIN_RUN)
        if bad >= 0:
            self._failed(bad)
        return rows

    def _failed(self, record: int) -> None:
        """A kernel's write of ``record`` failed: the same call from Python raises its
        ``OSError`` (errno and all); one that now succeeds still fell short in the kernel."""
        offset = int(record) * self.record_bytes
        os.pwrite(self._fd, bytes(self.record_bytes), offset)
        raise OSError(errno.EIO, f"disk tier {self.path}: short write at byte {offset}")

    def _grow(self, records: int) -> None:
        """Room in the file for ``records`` records."""
        have = self.file_records
        if records <= have:
            return
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
        self.file_records = want
        self._map.cover(want * self.record_bytes)
