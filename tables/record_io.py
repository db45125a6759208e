"""``pread``/``pwrite`` of fixed-size records from numba kernels: the disk tier's only I/O.

Records are copied between a file and a bounded buffer with one system call per run of
consecutive records, never through a mapping of the file: a mapped file's pages count in the
process's RSS once touched (and the kernel's fault-around maps up to 16 neighbouring cached
pages per fault), so a randomly read mapped tier file grows RSS far past the records read,
while ``pread`` copies just the bytes asked for. The calls are declared as external symbols
(resolved in the process, libc's), so the kernels that use them cache like any other.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from core.kernel_cache import JIT, kernel


def _file_call(symbol: str):
    """An intrinsic ``(fd, array, offset) -> bytes done or -1``: ``symbol`` (pread or pwrite)
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


pread = _file_call("pread")
pwrite = _file_call("pwrite")


@kernel(**JIT)
def transfer(fd: int, records: np.ndarray, record_bytes: int, buf: np.ndarray, write: bool) -> np.int64:
    """Read (or write) record ``records[i]`` of file ``fd`` into (from) row ``i`` of ``buf``
    (uint8, one record a row), one call per run of consecutive records; returns -1 when every
    byte went, else the first record whose call failed or fell short."""
    n = records.shape[0]
    i = 0
    while i < n:
        k = i + 1
        while k < n and records[k] == records[k - 1] + 1:
            k += 1
        rows = buf[i:k]
        off = records[i] * record_bytes
        done = pwrite(fd, rows, off) if write else pread(fd, rows, off)
        if done != rows.size:
            return np.int64(records[i])
        i = k
    return np.int64(-1)
