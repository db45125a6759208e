"""What the table benchmarks share: their key streams, how they read a process's RSS, and the
collector's state around their timed steps."""

from __future__ import annotations

import ctypes
import gc
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np


def rss_bytes() -> int:
    """Resident bytes, after handing freed heap pages back to the OS: glibc keeps freed
    batch temporaries on its free lists, which is allocator slack, not table memory."""
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def key_batches(kind: str, keys: np.ndarray, batch: int, count: int, rng: np.random.Generator) -> list[np.ndarray]:
    n = keys.shape[0]
    out = []
    for _ in range(count):
        if kind == "uniform":
            idx = rng.integers(0, n, batch)
        else:
            ranks = rng.zipf(1.1, batch * 2)
            idx = (ranks[ranks <= n][:batch] - 1)
            while idx.shape[0] < batch:  # rejection sampling keeps ranks within the table
                more = rng.zipf(1.1, batch)
                idx = np.concatenate([idx, more[more <= n] - 1])[:batch]
        out.append(keys[idx])
    return out


@contextmanager
def frozen_heap() -> Iterator[None]:
    """Timed steps with what lives before them frozen, as a shard process does once it serves
    (ps/shard_server.py): the collector's full passes then skip numba's object graphs. Undone
    after, so a run in its caller's process (a test's) leaves the collector as it was."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
