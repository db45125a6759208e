"""Software prefetch for numba kernels (LLVM's ``llvm.prefetch``).

Random row accesses on a big table are bound by memory latency, one miss at a time. A
kernel that knows which rows it will touch a few iterations ahead issues prefetches for
them so several misses overlap; this roughly halves the time of lookups and updates here.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from core.kernel_cache import JIT, kernel


@intrinsic
def prefetch(typingctx, arr, index):
    """Prefetch the start of ``arr[index]`` (a row of a 2-d array, or one element of 1-d)."""
    return _prefetch(arr, index, last=False)


@intrinsic
def prefetch_end(typingctx, arr, index):
    """Prefetch the end of row ``arr[index]`` of a 2-d array: a row that is not a multiple of the
    64-byte line (a 40-byte [wide, dim 9] row straddles two lines half of the time) needs its
    second line too, else that miss is taken one at a time in the loop."""
    return _prefetch(arr, index, last=True)


def _prefetch(arr, index, *, last: bool):
    if not isinstance(arr, types.Array) or not isinstance(index, types.Integer):
        return None
    sig = types.void(arr, index)

    def codegen(context, builder, signature, args):
        aryty = signature.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        idx = context.cast(builder, args[1], signature.args[1], types.intp)
        shape = cgutils.unpack_tuple(builder, ary.shape)
        inds = [idx] + [context.get_constant(types.intp, 0)] * (aryty.ndim - 1)
        if last and aryty.ndim == 2:
            inds[1] = builder.sub(shape[1], context.get_constant(types.intp, 1))
        ptr = cgutils.get_item_pointer2(context, builder, data=ary.data,
                                        shape=shape,
                                        strides=cgutils.unpack_tuple(builder, ary.strides),
                                        layout=aryty.layout, inds=inds)
        i8p = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0")
        # rw=0 (read; the line is written soon after, which is fine), locality=3, data cache.
        builder.call(fn, [builder.bitcast(ptr, i8p), ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return sig, codegen


@kernel(**JIT)
def prefetch_row(cols: tuple, row: int) -> None:
    """Prefetch row ``row`` of each column of ``cols`` (2-d arrays, :func:`tables.rows.column_words`)."""
    for c in range(len(cols)):
        if cols[c].shape[1]:
            prefetch(cols[c], row)
