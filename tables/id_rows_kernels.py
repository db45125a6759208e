"""Kernels of keyed fixed-width uint64 rows (:mod:`tables.id_rows_table`).

A ring row of capacity ``N`` is ``N`` + ``N`` + 1 words: ``[count, ids[N], times[N]]``.
``count`` is how many entries were ever appended; entry ``j`` (0-based, oldest first) sits at
``j % N``, so the newest ``min(count, N)`` entries are kept; an entry already kept is not
appended twice. Times are float64 seconds stored
as their bits. A put row is whatever the caller encoded: the table does not read it.
"""

from __future__ import annotations

import numpy as np

from core.kernel_cache import JIT, kernel


def ring_words(capacity: int) -> int:
    """Words of a ring row holding ``capacity`` (id, time) entries."""
    return 1 + 2 * capacity


def ring_capacity(words: int) -> int:
    return (words - 1) // 2


@kernel(**JIT)
def ring_append(words: np.ndarray, rows: np.ndarray, ids: np.ndarray, time_bits: np.ndarray) -> None:
    """Append ``(ids[i], time_bits[i])`` to ring row ``rows[i]`` of ``words`` (uint64 (n, W)), in
    input order (a key's events must arrive oldest first); rows < 0 are skipped. An entry the
    ring already holds (same id and time) is not appended again: events trained twice (a
    rollback, a restarted worker re-reading its partition) leave the history as it was."""
    cap = np.uint64((words.shape[1] - 1) // 2)
    n_cap = np.int64(cap)
    for i in range(rows.shape[0]):
        r = rows[i]
        if r < 0:
            continue
        c = words[r, 0]
        held = np.int64(min(c, cap))
        seen = False
        for k in range(held):
            if words[r, 1 + k] == ids[i] and words[r, 1 + n_cap + k] == time_bits[i]:
                seen = True
                break
        if seen:
            continue
        pos = np.int64(c % cap)
        words[r, 1 + pos] = ids[i]
        words[r, 1 + n_cap + pos] = time_bits[i]
        words[r, 0] = c + np.uint64(1)


@kernel(**JIT)
def put_rows(words: np.ndarray, rows: np.ndarray, values: np.ndarray) -> None:
    """``words[rows[i]] = values[i]`` in input order (the last of duplicate rows wins); rows < 0 skipped."""
    w = words.shape[1]
    for i in range(rows.shape[0]):
        r = rows[i]
        if r < 0:
            continue
        for j in range(w):
            words[r, j] = values[i, j]


_NAN_BITS = np.uint64(0x7FF8000000000000)


@kernel(**JIT)
def _unroll(rows: np.ndarray, ids_out: np.ndarray, tbits_out: np.ndarray, lengths: np.ndarray) -> None:
    cap = (rows.shape[1] - 1) // 2
    for i in range(rows.shape[0]):
        c = np.int64(rows[i, 0])
        m = min(c, cap)
        lengths[i] = m
        for k in range(cap):
            if k < m:
                pos = (c - 1 - k) % cap
                ids_out[i, k] = rows[i, 1 + pos]
                tbits_out[i, k] = rows[i, 1 + cap + pos]
            else:
                ids_out[i, k] = 0
                tbits_out[i, k] = _NAN_BITS


def ring_unroll(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Ring rows (n, 1 + 2N) to their entries newest first: ids (n, N) uint64, times (n, N)
    float64 (unused tail: id 0, time NaN) and lengths (n,) int64."""
    n, cap = rows.shape[0], ring_capacity(rows.shape[1])
    ids, tbits, lengths = np.empty((n, cap), np.uint64), np.empty((n, cap), np.uint64), np.empty(n, np.int64)
    _unroll(np.ascontiguousarray(rows, np.uint64), ids, tbits, lengths)
    return ids, tbits.view(np.float64), lengths


# Rate rows (:meth:`tables.id_rows_table.IdRowsTable.observe_rates`): 2 words a row, ``[last, gap | weight]``.
# ``last``: the step the key last occurred + 1 (0: never); word 1 holds two float32, the moving average of the
# steps between occurrences and the sum of its samples' weights (models.item_frequency's B and W). The clock row
# holds the steps counted so far in its word 0.
_RATE_ONE = np.float32(1.0)
_RATE_MIN_GAP = np.float32(1e-3)  # models.item_frequency's: bounds the rate of a key seen many times a step


@kernel(**JIT)
def rate_observe(words: np.ndarray, floats: np.ndarray, rows: np.ndarray, clock: np.int64, alpha: np.float32) -> None:
    """One step in which the keys of ``rows`` occurred (repeats count; rows < 0 skipped): Yi et al.'s
    Algorithm 1 with models.item_frequency's bias correction, then the clock row's step count + 1.
    ``floats`` is ``words`` viewed as float32 (n, 4)."""
    step = np.int64(words[clock, 0])
    keep = _RATE_ONE - alpha
    for i in range(rows.shape[0]):
        r = rows[i]
        if r < 0:
            continue
        last = np.int64(words[r, 0])
        g = np.float32(step + 1) if last == 0 else np.float32(step - (last - 1))
        floats[r, 2] = keep * floats[r, 2] + alpha * g
        floats[r, 3] = keep * floats[r, 3] + alpha
        words[r, 0] = np.uint64(step + 1)
    words[clock, 0] = np.uint64(step + 1)


@kernel(**JIT)
def rate_expected(words: np.ndarray, floats: np.ndarray, rows: np.ndarray, clock: np.int64, out: np.ndarray) -> None:
    """``out[i]``: expected occurrences per step of ``rows[i]``'s key, 1 / (B / W); a key never seen
    (row < 0 or no occurrence) counts as once in all the steps so far."""
    steps = np.int64(words[clock, 0]) if clock >= 0 else np.int64(0)
    unseen = np.float32(max(steps, 1))
    for i in range(rows.shape[0]):
        r = rows[i]
        if r < 0 or words[r, 0] == 0 or floats[r, 3] <= 0:
            out[i] = _RATE_ONE / unseen
            continue
        g = floats[r, 2] / floats[r, 3]
        out[i] = _RATE_ONE / (g if g > _RATE_MIN_GAP else _RATE_MIN_GAP)
