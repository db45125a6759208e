"""The k-th smallest of a float32 array, by a radix select: the byte budget's threshold score.

Three passes over the keys' order-preserving bit patterns, each a histogram of the next bits
of the keys that agree with the prefix chosen so far, find the k-th smallest without moving
any key. ``np.partition`` does the same work by moving keys, several times slower on the
RAM tier's hundreds of thousands of scores, many of them tied (small show counts), and a
demotion pays it every time.
"""

from __future__ import annotations

import numpy as np

from core.kernel_cache import JIT, kernel

_SIGN = np.uint32(0x80000000)
_PASSES = ((21, 11), (10, 11), (0, 10))  # (shift, bits): the 32 bits, high to low


@kernel(**JIT)
def _ordered(u: np.uint32) -> np.uint32:
    """A float32's bits as an unsigned integer in the floats' order (negatives flipped)."""
    return ~u if u & _SIGN else u | _SIGN


@kernel(**JIT)
def _kth(bits: np.ndarray, k: int) -> np.int64:
    """Index of an element of ``bits`` (float32 bit patterns) whose value is the ``k``-th
    smallest (0-based)."""
    n = bits.shape[0]
    prefix = np.uint32(0)
    mask = np.uint32(0)
    for shift, width in _PASSES:
        size = 1 << width
        hist = np.zeros(size, np.int64)
        low = np.uint32(size - 1)
        for i in range(n):
            u = _ordered(bits[i])
            if (u & mask) == prefix:
                hist[(u >> np.uint32(shift)) & low] += 1
        b = 0
        while k >= hist[b]:
            k -= hist[b]
            b += 1
        prefix |= np.uint32(b) << np.uint32(shift)
        mask |= low << np.uint32(shift)
    for i in range(n):
        if _ordered(bits[i]) == prefix:
            return np.int64(i)
    return np.int64(-1)


def kth_smallest(keys: np.ndarray, k: int) -> np.float32:
    """The ``k``-th smallest (0-based) of ``keys`` (float32, no NaN, ``0 <= k < len``): what
    ``np.partition(keys, k)[k]`` is."""
    return keys[_kth(keys.view(np.uint32), k)]
