"""The disk tier of a sparse table: the rows RAM's byte budget has no room for.

Each row lives in exactly one tier. A row on disk is a fixed-size record of a file holding
every column of the row, packed in the row store's order (the key first, then ``params``,
``state``, ``wide_state``, show, click, last_seen, created, mod_epoch) at ``record *
record_bytes``. RAM keeps only the index from key to record (:mod:`tables.disk_index`, its
slots alone), a free bit a record, a span buffer and each call's bounded copy buffer
(``BUFFER_RECORDS``), so a disk row costs RAM its index slots and a bit (the mapped file's
pages are page cache, outside the budget). Records are read from a shared mapping of the file
and written by ``pwrite`` (spans of records close together) or through the mapping (records
far apart), both in numba kernels (:mod:`tables.record_io`), never one Python call per key;
eviction, TTL and delta saves read the columns they need from the records the same way. A
record is a whole number of 8-byte words (padded), which the mapped reads copy.

No row is written where it was, but in a tier with no free record: a write (a demotion's rows, a
push's updated ones) takes the free records a write head hands out (:meth:`DiskTier._place`),
which sweeps the file from its start to its end, so the records of one write lie close together
and go out as a few spans, the records between them written back unchanged. A store into a
record's own page instead faults once per page after every writeback of it, which at millions of
disk rows cost a push more than the rest of its work. At the file's end the head appends while
the live records would fill more than ``FULL_SHARE`` of the file, else it wraps to the start, so
the file keeps about a quarter of its records free and the head finds one every few records.
Which records are free is a bit each (:mod:`tables.free_records`).

The file is grown with ``posix_fallocate`` before any record past its end is written: a full
disk is an ``OSError`` at growth (:class:`core.errors.DiskFull`), never a failed write of a
record. ``max_bytes`` caps the file: a full tier evicts its coldest rows (by the table's
eviction score) to take new ones, and the head then finds its free records further apart.

The file is scratch, not a save: saves write disk rows like RAM rows
(:mod:`tables.table_files`) and every tier starts a file of its own, empty (named by process
and a counter, so shards and scratch tables on one machine never share one); files left by a
process that died are removed by the next tier opened for that table in that directory. While
a save reads records (:meth:`hold`), records freed meanwhile are not handed out (the head
writes them back unchanged when it passes) and pushes do not move rows (:meth:`rewrite` waits
for no save: its rows are promoted instead), so what it reads is what the consistent point
held. Callers hold the table lock.
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
from tables import disk_index, free_records, hashmap
from tables.record_io import SPAN_BUFFER_BYTES, SPAN_BYTES, WORD, RecordMap, gather_field, pack, scatter, unpack
from tables.rows import COLUMN_DTYPES, column_words, release_pages

PAYLOAD = ("params", "state", "wide_state")  # the float32 2-d columns
GROW_RECORDS = 1 << 16  # the file grows by at least this many records (or an eighth) at a time
BUFFER_RECORDS = 1 << 11  # records copied per kernel call: the bound of the tier's copy buffers (a batch's temporaries)
REHASH_SLOTS = 1 << 17  # index slots rehashed between two releases of the old index's pages
GROW_SOON = 0.9  # past this share of its load limit the index counts at its doubled size
SPAN_SHARE = 256  # the span buffer is at most this share of the records written (and SPAN_BUFFER_BYTES)
FULL_SHARE = 0.75  # live share of the records past which the write head, at the file's end, appends instead of wrapping
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
        self.high = 0  # records ever handed out: records 0..high-1 are live, free or held
        self.head = 0  # the next record the write head looks at (high: the file's end)
        self.rows = 0
        self.free_bits = np.zeros(0, np.uint8)  # a bit a record of the file, set when free (:mod:`tables.free_records`)
        self._span = np.empty((1, self.record_bytes // WORD), np.uint64)  # the longest span a write sends whole
        self._span_records = max(1, SPAN_BYTES // self.record_bytes)  # this close: one span, sent once this long
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
        ``records``' rows, copied from the mapping column by column."""
        m = records.shape[0]
        out = {name: np.empty((m, *self.dtype[name].shape), self.dtype[name].base) for name in names}
        if m:
            offsets = np.array([self.dtype.fields[name][1] // 4 for name in names], np.int64)
            unpack(self._words().view(np.uint32), self.record_bytes // 4, records, offsets,
                   column_words(out, names))
        return out

    def live_records(self) -> np.ndarray:
        return np.flatnonzero(disk_index.live(self.slots, self.high)) if self.rows else np.empty(0, np.int64)

    def file_bytes(self) -> int:
        return self.file_records * self.record_bytes

    def ram_bytes(self) -> int:
        """What the tier holds in RAM: its index, a free bit a record and its span buffer (a
        call's copy buffer is a temporary of the batch, like its other buffers). An index near
        its growth counts at the doubled size, so the RAM budget makes room before the larger
        index is made."""
        index = self.slots.nbytes
        if self.rows > GROW_SOON * hashmap.MAX_LOAD * self.slots.shape[0]:
            index *= 2
        return index + self.free_bits.nbytes + self._span.nbytes + sum(h.nbytes for h in self._held)

    # ---------------------------------------------------------------- writes
    def room(self) -> int:
        """Rows the tier can take without evicting."""
        return self.max_records - self.rows - self._held_records()

    def _held_records(self) -> int:
        return sum(int(h.shape[0]) for h in self._held)

    def put(self, cols: dict[str, np.ndarray], rows: np.ndarray | None = None) -> None:
        """Write rows (every row store column, keys not on disk; ``rows``: which of ``cols``'
        rows, default all, so a row store's columns are read in place, not copied) into free
        records; the caller made room (:meth:`room`). The records come from the write head
        (:meth:`_place`), so they lie close together and go out as spans by ``pwrite``.
        :class:`DiskFull` when the file cannot grow and the free records are too few: then
        nothing was written."""
        m = cols["keys"].shape[0] if rows is None else rows.shape[0]
        if m == 0:
            return
        at = self._place(m)
        try:
            self._write(at, cols, rows)
        except BaseException:
            free_records.mark(self.free_bits, at, True)
            raise
        self.rows += m
        if self.rows > self.slots.shape[0] * hashmap.MAX_LOAD:
            self._grow_index()
        disk_index.update(self.slots, self.hash_key, cols["keys"] if rows is None else cols["keys"][rows], at,
                          remove=False)

    def _place(self, m: int) -> np.ndarray:
        """Records for ``m`` new rows, marked live: the write head sweeps the file from its
        start to its end, handing out the free records it passes, so a write's records lie
        close together whatever freed them; at the file's end it appends (growing the file)
        while the live records would be more than ``FULL_SHARE`` of those there, else it
        wraps to the start. :class:`DiskFull` (nothing placed) when the file cannot grow and
        the free records are too few."""
        parts: list[np.ndarray] = []
        need = m
        free = self.high - self.rows - self._held_records()  # free records below high
        wrapped = False
        try:
            while need:
                if self.head >= self.high:
                    fuller = self.rows + m > FULL_SHARE * self.high
                    grow = min(need if fuller else max(0, need - free), self.max_records - self.high)
                    if grow:
                        try:
                            self._grow(self.high + grow)
                        except DiskFull:
                            if free < need:
                                raise
                            grow = 0  # the file cannot grow: the free records take the rows
                    if grow:
                        got = np.arange(self.high, self.high + grow)
                        self.high += grow
                        self.head = self.high
                        parts.append(got)
                        need -= grow
                        continue
                    if wrapped:
                        raise DiskFull(f"disk tier {self.path}: {need} rows have no free record",
                                       detail={"path": str(self.path)})
                    self.head, wrapped = 0, True
                    continue
                got = np.empty(need, np.int64)
                k, self.head = free_records.scan(self.free_bits, self.head, self.high, got)
                free_records.mark(self.free_bits, got[:k], False)
                free -= k
                parts.append(got[:k])
                need -= k
        except BaseException:
            for got in parts:
                free_records.mark(self.free_bits, got, True)
            raise
        return np.concatenate(parts) if len(parts) != 1 else parts[0]

    def rewrite(self, records: np.ndarray, cols: dict[str, np.ndarray]) -> None:
        """Replace the rows of ``records`` (live, none held by a save) with the rows ``cols``
        (every row store column, keys unchanged): a push's update. The rows move to records
        at the write head, so the write is a span, not a store into each record's page
        (which faults again after every writeback of it); a tier with no free record for
        them (or a disk that refuses to grow the file) writes them into their own."""
        m = records.shape[0]
        if m == 0:
            return
        assert self.holds == 0, "a save reads these records"
        keys = cols["keys"]
        if self.room() >= m:
            try:
                self.put(cols)  # the new copies first: a failed write leaves the rows where they were
            except DiskFull:
                pass  # nothing written: the file cannot grow and too few records are free
            else:
                self.free(records, keys)  # the index drops the old records' entries alone
                return
        self._write(records, cols)  # a full tier or disk: the rows stay in their own records

    def _write(self, records: np.ndarray, cols: dict[str, np.ndarray], rows: np.ndarray | None = None) -> None:
        """Row ``i`` (of ``rows``, default all of ``cols``' rows) into record ``records[i]``, in
        the records' order so neighbours share a span, a copy buffer at a time."""
        order = np.argsort(records, kind="stable")
        words = column_words(cols)
        buf = np.empty((min(records.shape[0], BUFFER_RECORDS), self.record_bytes // 4), np.uint32)
        for start in range(0, records.shape[0], BUFFER_RECORDS):
            part = order[start : start + BUFFER_RECORDS]
            pack(words, part if rows is None else rows[part], buf)
            self._send(records[part], buf)

    def free(self, records: np.ndarray, keys: np.ndarray) -> None:
        """Forget the rows of ``records`` (promoted or evicted), whose keys are ``keys``; their
        records are handed out again once no save reads the file."""
        if records.shape[0] == 0:
            return
        disk_index.update(self.slots, self.hash_key, keys, records, remove=True)
        self.rows -= int(records.shape[0])
        if self.holds:
            self._held.append(records.copy())  # not free until the save ends
        else:
            free_records.mark(self.free_bits, records, True)

    def clear(self) -> None:
        """No rows; the file keeps its size (its records are handed out again)."""
        self.slots = np.zeros(hashmap.slots_for(16), np.uint64)
        self.rows = 0
        self._held = []
        self.free_bits[:] = 0
        free_records.mark(self.free_bits, np.arange(self.high), True)
        self.head = 0

    def hold(self) -> None:
        """A save reads records from now until :meth:`release`: freed ones wait."""
        self.holds += 1

    def release(self) -> None:
        self.holds -= 1
        if self.holds == 0 and self._held:
            for records in self._held:
                free_records.mark(self.free_bits, records, True)
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

    def _send(self, records: np.ndarray, buf: np.ndarray) -> None:
        """Records ``records`` (sorted) from ``buf``'s first rows (a record's uint32 words a row)."""
        rows = buf[: records.shape[0]]
        bad = scatter(self._fd, self._words(writable=True), records,
                      rows.view(np.uint64).reshape(-1, self.record_bytes // WORD),
                      self._span_records, self._span)
        if bad >= 0:
            self._failed(bad)

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
        self.free_bits = np.concatenate([self.free_bits, np.zeros(free_records.bits_for(want) - self.free_bits.shape[0],
                                                                   np.uint8)])
        span = min(SPAN_BUFFER_BYTES, records * self.record_bytes // SPAN_SHARE) // self.record_bytes
        if span > self._span.shape[0]:  # a small tier's writes are small: its buffer stays small beside its budget
            self._span = np.empty((span, self.record_bytes // WORD), np.uint64)
        self._map.cover(want * self.record_bytes)
