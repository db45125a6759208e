"""Which disk rows a pull moves into RAM: those read a second time within a window.

A pull answers a disk row from its record (a read) and leaves it on disk; moving it into RAM
costs a demotion of a RAM row as well, so only a row read again soon earns it (the
"doorkeeper" of TinyLFU-style cache admission); a key one pull holds twice is read twice.
The memory of first reads is a fixed array of 32-bit marks, one slot per key hash: a key's
mark stays until another key that lands on its slot is read from disk, so the window is about
as many disk reads as there are slots, and a key forgotten (or never marked) just waits for
its next read. A promoted key's mark is cleared. A push neither reads nor sets marks: it
updates a disk row in its record (:meth:`tables.tiering.TableTier.push`), so a row earns RAM
by being read, as training reads every row it pushes. The marks are a hint, never saved: a restored table starts with
none. They weigh ``BUDGET_SHARE`` of the RAM budget they sit in (at most ``MAX_SLOTS``), so
a small budget keeps its rows.
"""

from __future__ import annotations

import numpy as np

from core.kernel_cache import JIT, kernel
from tables.hashmap import U32, keyed_hash

MAX_SLOTS = 1 << 17  # marks kept at most: the window is about this many disk reads (512 KiB of RAM)
UNBUDGETED_SLOTS = 1 << 16  # marks of a table without a RAM budget
BUDGET_SHARE = 1 / 256  # of the RAM byte budget, the most the marks take


def slots_for(budget: int | None) -> int:
    """Marks for a RAM byte budget (None: none): a power of two, at least 16."""
    if budget is None:
        return UNBUDGETED_SLOTS
    slots = 16
    while slots * 2 <= MAX_SLOTS and slots * 2 * 4 <= budget * BUDGET_SHARE:
        slots *= 2
    return slots
_ONE = np.uint32(1)


@kernel(**JIT)
def second_reads(marks: np.ndarray, hkey: np.ndarray, keys: np.ndarray, repeated: np.ndarray,
                 earned: np.ndarray) -> int:
    """``earned[i]``: whether ``keys[i]`` (unique, each read from disk now) was marked or is
    ``repeated`` in this read, which clears its mark; the others are marked. Returns how
    many earned."""
    mask = np.uint64(marks.shape[0] - 1)
    k0, k1 = hkey[0], hkey[1]
    got = 0
    for i in range(keys.shape[0]):
        h = keyed_hash(keys[i], k0, k1)
        slot = h & mask
        mark = np.uint32(h >> U32) | _ONE  # never 0: 0 is an empty slot
        if repeated[i] or marks[slot] == mark:
            if marks[slot] == mark:
                marks[slot] = 0
            earned[i] = True
            got += 1
        else:
            marks[slot] = mark
            earned[i] = False
    return got


class SecondRead:
    """The marks of one table's disk tier; keys hashed under ``hash_key`` (the table's)."""

    def __init__(self, hash_key: np.ndarray, slots: int = UNBUDGETED_SLOTS) -> None:
        self.hash_key = hash_key
        self.marks = np.zeros(0, np.uint32)
        self.resize(slots)

    def resize(self, slots: int) -> None:
        """``slots`` marks (a power of two), none set, unless it already has that many."""
        if slots < 1 or slots & (slots - 1):
            raise ValueError(f"slots must be a power of two, got {slots}")
        if slots != self.marks.shape[0]:
            self.marks = np.zeros(slots, np.uint32)

    def earned(self, keys: np.ndarray, repeated: np.ndarray | None = None) -> np.ndarray:
        """Which of ``keys`` (unique, read from disk by this pull; ``repeated``: which the pull
        holds more than once, a second read already) to promote; marks the rest."""
        out = np.empty(keys.shape[0], np.bool_)
        if repeated is None:
            repeated = np.zeros(keys.shape[0], np.bool_)
        if keys.shape[0]:
            second_reads(self.marks, self.hash_key, keys, repeated, out)
        return out

    def forget(self) -> None:
        """No marks (the table's rows were replaced)."""
        self.marks[:] = 0

    @property
    def nbytes(self) -> int:
        return self.marks.nbytes
