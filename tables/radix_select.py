"""The k-th smallest of a float32 array, by a radix select: the byte budget's threshold score.

Three passes over the keys' order-preserving bit patterns, each a histogram of the next bits
of the keys that agree with the prefix chosen so far, find the k-th smallest; only the first
reads every key, the other two the keys of its chosen bucket, copied out. ``np.partition``
does the same work by moving keys, several times slower on the RAM tier's hundreds of
thousands of scores, many of them tied (small show counts), and a demotion pays it every time.
"""

from __future__ import annotations

import numpy as np

from core.kernel_cache import JIT, kernel

_SIGN = np.uint32(0x80000000)
_TOP = 21  # the first pass histograms the keys' top 11 bits ...
_PASSES = ((10, 11), (0, 10))  # ... then (shift, bits) of the rest, high to low, over the top bucket's keys alone
_LANES = 4  # histograms counted side by side: tied keys (many) would each wait for the last's increment


@kernel(**JIT)
def _ordered(u: np.uint32) -> np.uint32:
    """A float32's bits as an unsigned integer in the floats' order (negatives flipped)."""
    return ~u if u & _SIGN else u | _SIGN


@kernel(**JIT)
def _bucket(hist: np.ndarray, k: int) -> tuple[int, int]:
    """The bucket of ``hist`` (lanes x buckets) holding the ``k``-th smallest, and ``k`` within it."""
    b = 0
    while True:
        count = 0
        for lane in range(hist.shape[0]):
            count += hist[lane, b]
        if k < count:
            return b, k
        k -= count
        b += 1


@kernel(**JIT)
def _kth(bits: np.ndarray, k: int) -> np.uint32:
    """The ordered bit pattern (:func:`_ordered`) of the ``k``-th smallest (0-based) of
    ``bits`` (float32 bit patterns): one pass over every key, then two over the keys that
    share its top bits, copied out."""
    n = bits.shape[0]
    hist = np.zeros((_LANES, 1 << (32 - _TOP)), np.int64)
    for i in range(n):
        hist[i & (_LANES - 1), _ordered(bits[i]) >> np.uint32(_TOP)] += 1
    b, k = _bucket(hist, k)
    top = np.uint32(b)  # an int64 here would make every comparison below a conversion
    keys = np.empty(hist[:, b].sum(), np.uint32)
    m = 0
    for i in range(n):
        u = _ordered(bits[i])
        if u >> np.uint32(_TOP) == top:
            keys[m] = u
            m += 1
    prefix = top << np.uint32(_TOP)
    mask = np.uint32(0xFFFFFFFF) << np.uint32(_TOP)
    for shift, width in _PASSES:
        hist = np.zeros((_LANES, 1 << width), np.int64)
        low = np.uint32((1 << width) - 1)
        for i in range(m):
            u = keys[i]
            if (u & mask) == prefix:
                hist[i & (_LANES - 1), (u >> np.uint32(shift)) & low] += 1
        b, k = _bucket(hist, k)
        prefix |= np.uint32(b) << np.uint32(shift)
        mask |= low << np.uint32(shift)
    return prefix


def kth_smallest(keys: np.ndarray, k: int) -> np.float32:
    """The ``k``-th smallest (0-based) of ``keys`` (float32, no NaN, ``0 <= k < len``): what
    ``np.partition(keys, k)[k]`` is."""
    u = int(_kth(keys.view(np.uint32), k))
    raw = u ^ 0x80000000 if u & 0x80000000 else ~u & 0xFFFFFFFF  # _ordered undone
    return np.array([raw], np.uint32).view(np.float32)[0]
