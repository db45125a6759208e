"""Each item's count of training records, decayed by event time: what is popular now.

An item's count as of time ``T`` is ``sum_j 0.5 ** ((T - t_j) / half_life)`` over its records
``j`` (any label: a record is an item a user chose), ``T`` the newest event time seen. Counts
are kept as of ``T`` and rescaled by ``0.5 ** (dT / half_life)`` when it moves, so the sum is
exact in any arrival order. Records are buffered and folded into the sorted id and count arrays
every ``FOLD_EVERY`` records or when the counts are read, so a batch costs an append, not a
merge over every item. Counts that decayed below ``FLOOR`` are dropped: memory follows the items
active lately, not every item ever seen.

Each trainer counts the records it reads; the counts of several trainers as of different
times are summed exactly by :func:`merge_counts` (each rescaled to the newest time first), which
is what the chief's export does with the workers' parts of a pass (the served popularity prior,
service.popularity_prior).
"""

from __future__ import annotations

import time

import numpy as np

FOLD_EVERY = 1 << 16  # records buffered before they are folded into the sorted arrays
FLOOR = 1e-6  # a count below this is dropped: log1p of it moves no score
# an event time past now + this is read as now + this: one far-future record would decay every count to 0
FUTURE_SKEW_S = 300.0

Counts = tuple[np.ndarray, np.ndarray, float]  # (ids uint64 sorted, counts float64, as of this event time)


def _summed(ids: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct ``ids`` (sorted) and the sum of their ``weights``, less those below FLOOR."""
    if ids.shape[0] == 0:
        return np.empty(0, np.uint64), np.empty(0, np.float64)
    uniq, inverse = np.unique(ids, return_inverse=True)
    total = np.bincount(inverse, weights=weights, minlength=uniq.shape[0])
    keep = total >= FLOOR
    return uniq[keep], total[keep]


def decayed(counts: np.ndarray, since: float, until: float, half_life_s: float) -> np.ndarray:
    """``counts`` as of ``since`` brought forward to ``until`` (>= since)."""
    if not np.isfinite(since) or until <= since:
        return counts
    return counts * np.exp2(-(until - since) / half_life_s)


def merge_counts(parts: list[Counts], half_life_s: float) -> Counts:
    """The sum of several counters' counts, each brought to the newest ``as_of`` among them."""
    parts = [p for p in parts if p[0].shape[0]]
    if not parts:
        return np.empty(0, np.uint64), np.empty(0, np.float64), float("nan")
    as_of = max(p[2] for p in parts)
    ids, counts = _summed(np.concatenate([p[0] for p in parts]),
                          np.concatenate([decayed(p[1], p[2], as_of, half_life_s) for p in parts]))
    return ids, counts, as_of


class DecayedItemCounts:
    """One trainer's decayed item counts (the module docstring)."""

    def __init__(self, half_life_s: float) -> None:
        if not half_life_s > 0:
            raise ValueError(f"half_life_s must be positive, got {half_life_s}")
        self.half_life_s = float(half_life_s)
        self._ids = np.empty(0, np.uint64)
        self._counts = np.empty(0, np.float64)
        self._as_of = float("nan")  # no event yet
        self._pending: list[tuple[np.ndarray, np.ndarray]] = []
        self._n_pending = 0

    def observe(self, items: np.ndarray, times: np.ndarray) -> None:
        """Count one record per ``items[i]`` (0: no item) at event time ``times[i]`` (NaN: none, not counted)."""
        items = np.asarray(items, np.uint64)
        times = np.asarray(times, np.float64)
        if items.shape != times.shape:
            raise ValueError(f"items {items.shape} and times {times.shape} differ in shape")
        keep = (items != 0) & np.isfinite(times)
        if not keep.all():
            items, times = items[keep], times[keep]
        if items.shape[0] == 0:
            return
        self._pending.append((items.copy(), np.minimum(times, time.time() + FUTURE_SKEW_S)))
        self._n_pending += items.shape[0]
        if self._n_pending >= FOLD_EVERY:
            self._fold()

    def _fold(self) -> None:
        if not self._pending:
            return
        ids = np.concatenate([p[0] for p in self._pending])
        times = np.concatenate([p[1] for p in self._pending])
        self._pending, self._n_pending = [], 0
        newest = float(times.max())
        as_of = newest if not np.isfinite(self._as_of) else max(self._as_of, newest)
        weights = np.exp2(-(as_of - times) / self.half_life_s)
        self._ids, self._counts = _summed(np.concatenate([self._ids, ids]), np.concatenate(
            [decayed(self._counts, self._as_of, as_of, self.half_life_s), weights]))
        self._as_of = as_of

    def counts(self) -> Counts:
        """(ids sorted, their decayed counts, the event time they are as of; NaN before any record)."""
        self._fold()
        return self._ids, self._counts, self._as_of

    def state(self) -> dict[str, np.ndarray]:
        ids, counts, as_of = self.counts()
        return {"ids": ids.copy(), "counts": counts.copy(), "as_of": np.array([as_of], np.float64)}

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        ids = np.asarray(state["ids"], np.uint64)
        counts = np.asarray(state["counts"], np.float64)
        if ids.ndim != 1 or ids.shape != counts.shape:
            raise ValueError(f"item counts: ids {ids.shape} and counts {counts.shape} differ in shape")
        self._ids, self._counts = _summed(ids, counts)
        self._as_of = float(np.asarray(state["as_of"], np.float64).reshape(-1)[0])
        self._pending, self._n_pending = [], 0


def state_counts(state: dict[str, np.ndarray]) -> Counts:
    """A :meth:`DecayedItemCounts.state` as :data:`Counts` (what :func:`merge_counts` takes)."""
    return (np.asarray(state["ids"], np.uint64), np.asarray(state["counts"], np.float64),
            float(np.asarray(state["as_of"], np.float64).reshape(-1)[0]))


def merge_states(states: list[dict[str, np.ndarray]], half_life_s: float, prefix: str = "") -> Counts | None:
    """The summed counts of the :meth:`DecayedItemCounts.state` in each of ``states`` under ``prefix`` (e.g. the
    workers' parts of a pass); None when none holds any."""
    parts = [state_counts({k: s[prefix + k] for k in ("ids", "counts", "as_of")})
             for s in states if prefix + "ids" in s]
    ids, counts, as_of = merge_counts(parts, half_life_s)
    return None if ids.shape[0] == 0 else (ids, counts, as_of)
