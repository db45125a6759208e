"""The disk tier's I/O of fixed-size records: reads from a shared mapping of its file, writes by
``pwrite`` (spans of records close together) or through the mapping (records far apart).

Reads copy the columns asked for out of a shared mapping of the file (:class:`RecordMap`) in a
numba kernel, straight into their arrays: a record in the page cache then costs a few cache
misses, not a system call (``pread`` of one record costs several times as much). The price is RSS: the mapped pages
count in the process's ``RssFile`` once touched, and the kernel maps whole cached folios on a
fault (``MADV_RANDOM`` does not stop it), so a randomly read tier maps most of its file after
its first reads. Those are page-cache pages of a shared file mapping (clean but for records just
written), the same pages ``pread`` would keep cached, and the kernel reclaims them under memory
pressure; a table's RAM budget bounds its anonymous memory (``RssAnon``), not them. A device
error under a mapped read is ``SIGBUS``, not an ``OSError``: the tier file is scratch on a local
disk, and saves hold the rows. A write's records that lie close together (the disk tier hands
out free records from a sweeping head) go as one span: the span is read by ``pread``, the
records put into it, and the whole span written by ``pwrite``. A store through the mapping into
a page the kernel has written back faults (ext4's ``page_mkwrite``), and a ``pwrite`` per
record costs as much, so only records too far apart to share a span are stored through the
mapping. Linux keeps a shared mapping coherent with
``pwrite``, and the file is allocated (``posix_fallocate``) before any record past its end is
written, so a store through the mapping never needs a block the disk lacks. The mapping's
address space is reserved ahead of the file (``RESERVE_BYTES``, no memory), so a growing file is
remapped rarely; callers hold the table lock, so no read runs across a remap. The calls are
declared as external symbols (resolved in the process, libc's), so the kernels that use them
cache like any other.
"""

from __future__ import annotations

import ctypes
import mmap
import os

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from core.kernel_cache import JIT, kernel
from tables.cache_hint import prefetch, prefetch_row

WORD = 8  # records are a whole number of these bytes (the words a write sends and the index checks keys by)
RESERVE_BYTES = 1 << 36  # address space a mapping takes at first (no memory): it is remapped past it
PF = 8  # records (or rows) ahead whose first word a kernel prefetches
SPAN_BYTES = 1 << 14  # a write's records this close form one span, sent by pwrite once it is this long; others
# are stored through the mapping, where a store faults once per page after each writeback of it
SPAN_BUFFER_BYTES = 1 << 20  # the longest span: the buffer a tier keeps for them (a fresh one per call, freed,
# would make glibc serve later large arrays from its heap, which keeps their pages: RSS past the RAM budget)


def _file_call(symbol: str):
    """An intrinsic ``(fd, array, offset) -> bytes done or -1``: ``symbol`` (``pwrite``)
    of all of a contiguous ``array``'s bytes at file ``offset``."""

    def typer(typingctx, fd, arr, offset):
        if not isinstance(arr, types.Array) or arr.layout != "C":
            return None
        sig = types.int64(fd, arr, offset)

        def codegen(context, builder, signature, args):
            aryty = signature.args[1]
            ary = context.make_array(aryty)(context, builder, args[1])
            i8p, i32, i64 = ir.IntType(8).as_pointer(), ir.IntType(32), ir.IntType(64)
            fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(i64, [i32, i8p, i64, i64]), symbol)
            item = context.get_constant(types.intp, context.get_abi_sizeof(context.get_data_type(aryty.dtype)))
            return builder.call(fn, [context.cast(builder, args[0], signature.args[0], types.int32),
                                     builder.bitcast(ary.data, i8p), builder.mul(ary.nitems, item),
                                     context.cast(builder, args[2], signature.args[2], types.int64)])

        return sig, codegen

    typer.__name__ = f"_{symbol}"
    return intrinsic(typer)


pwrite = _file_call("pwrite")
pread = _file_call("pread")


@kernel(**JIT)
def unpack(words: np.ndarray, record_words: int, records: np.ndarray, offsets: np.ndarray, cols: tuple) -> None:
    """Row ``i`` of each column ``cols[c]`` (2-d uint32 words, :func:`tables.rows.column_words`)
    from the words at ``offsets[c]`` of record ``records[i]`` of the mapped file ``words``
    (uint32, ``record_words`` a record): the columns a read asks for, with no copy of whole
    records between."""
    n = records.shape[0]
    for i in range(n):
        if i + PF < n:
            prefetch(words, records[i + PF] * record_words)
        at = records[i] * record_words
        for c in range(len(cols)):
            col = cols[c]
            o = at + offsets[c]
            for j in range(col.shape[1]):
                col[i, j] = words[o + j]


@kernel(**JIT)
def scatter(fd: int, words: np.ndarray, records: np.ndarray, rows: np.ndarray, near: int,
            span: np.ndarray) -> np.int64:
    """Record ``records[i]`` (ascending) of file ``fd`` from row ``i`` of ``rows`` (uint64, a
    record's words a row). Records no more than ``near`` apart form a group of at most
    ``span``'s rows of records (a buffer the caller keeps, so no call allocates one); a group
    spanning ``near`` records or more is one ``pwrite`` of its whole span (the records
    between its own read first by ``pread`` into ``span`` and written back unchanged), the
    rest are stored through the writable mapping ``words``. Returns -1 when every byte went,
    else the first record whose call failed or fell short."""
    n = records.shape[0]
    width = rows.shape[1]
    cap = span.shape[0]
    i = 0
    while i < n:
        first = records[i]
        k = i + 1
        while k < n and records[k] - records[k - 1] <= near and records[k] - first < cap:
            k += 1
        length = records[k - 1] - first + 1
        if length >= near:
            if length == k - i:
                run = rows[i:k]
            else:
                run = span[:length]
                if pread(fd, run, first * width * 8) != run.size * 8:
                    return np.int64(first)
                for r in range(i, k):
                    run[records[r] - first, :] = rows[r, :]
            if pwrite(fd, run, first * width * 8) != run.size * 8:
                return np.int64(first)
        else:
            for r in range(i, k):
                at = records[r] * width
                for j in range(width):
                    words[at + j] = rows[r, j]
        i = k
    return np.int64(-1)


@kernel(**JIT)
def pack(cols: tuple, rows: np.ndarray, out: np.ndarray) -> None:
    """Record ``i`` of ``out`` (uint32, a record's 4-byte words a row) from row ``rows[i]`` of
    every column of ``cols`` (2-d uint32 words, :func:`tables.rows.column_words`), packed in
    their order, the record's padding zeroed: the rows a write sends, in one call whatever
    the columns."""
    n = rows.shape[0]
    for i in range(n):
        if i + PF < n:
            prefetch_row(cols, rows[i + PF])
        r = rows[i]
        o = 0
        for c in range(len(cols)):
            col = cols[c]
            for j in range(col.shape[1]):
                out[i, o + j] = col[r, j]
            o += col.shape[1]
        for j in range(o, out.shape[1]):
            out[i, j] = 0


@kernel(**JIT)
def gather_field(floats: np.ndarray, records: np.ndarray, record_floats: int, offset: int, rows: np.ndarray,
                 out: np.ndarray) -> None:
    """Row ``rows[i]`` of ``out`` (float32) from the ``out.shape[1]`` floats at float
    ``offset`` of record ``records[i]`` of the mapped file ``floats`` (float32,
    ``record_floats`` a record)."""
    n = records.shape[0]
    width = out.shape[1]
    for i in range(n):
        if i + PF < n:
            prefetch(floats, records[i + PF] * record_floats + offset)
        at = records[i] * record_floats + offset
        r = rows[i]
        for j in range(width):
            out[r, j] = floats[at + j]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long)
_libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
_libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
_MAP_FAILED = ctypes.c_void_p(-1).value
_MAP_NORESERVE = 0x4000  # Linux: no swap is reserved for the range (read-only, file-backed)


class RecordMap:
    """A shared mapping of file ``fd`` whose reads may reach ``nbytes`` (the file is
    at least that long wherever they go); address space is reserved ahead (``RESERVE_BYTES``
    at first, never past ``max_bytes``), so a growing file is remapped rarely. Views of it
    (:meth:`words`) live for one call: a remap unmaps the old range."""

    def __init__(self, fd: int, max_bytes: int) -> None:
        self.fd = fd
        self.max_bytes = -(-max_bytes // mmap.PAGESIZE) * mmap.PAGESIZE
        self.addr = 0
        self.length = 0

    def cover(self, nbytes: int) -> None:
        """Map at least the first ``nbytes`` of the file."""
        if nbytes <= self.length:
            return
        length = min(self.max_bytes, max(RESERVE_BYTES, 4 * self.length))
        length = max(length, -(-nbytes // mmap.PAGESIZE) * mmap.PAGESIZE)
        addr = _libc.mmap(None, length, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_SHARED | _MAP_NORESERVE,
                          self.fd, 0)
        if addr in (None, _MAP_FAILED):
            err = ctypes.get_errno()
            raise OSError(err, f"mapping {length} bytes of the disk tier's file: {os.strerror(err)}")
        _libc.madvise(addr, length, mmap.MADV_RANDOM)  # no readahead around a fault: records are read alone
        self.close()
        self.addr, self.length = addr, length

    def words(self, nbytes: int, *, writable: bool = False) -> np.ndarray:
        """The first ``nbytes`` (mapped, a whole number of words) as a uint64 array, read-only
        unless ``writable`` (a write's)."""
        if nbytes == 0:
            return np.empty(0, np.uint64)
        arr = np.ctypeslib.as_array(ctypes.cast(self.addr, ctypes.POINTER(ctypes.c_uint64)), (nbytes // WORD,))
        arr.flags.writeable = writable
        return arr

    def close(self) -> None:
        if self.length:
            _libc.munmap(self.addr, self.length)
            self.addr = self.length = 0
