"""Feature eviction: which rows ``shrink()`` removes.

Show and click counts decay lazily: a row stores them as of its ``last_seen`` pass, and
their value at pass P is ``stored * decay ** (P - last_seen)``. So ending a pass touches no
row, and a table restored from base + deltas decays exactly like one that never stopped.
"""

from __future__ import annotations

import numpy as np

from core.kernel_cache import JIT, kernel
from tables.radix_select import kth_smallest
from tables.table_config import EvictionConfig

SCORE_COLUMNS = ("show", "click", "last_seen")  # the row columns eviction reads
SCORE_CHUNK = 1 << 16  # rows whose scores coldest() computes at a time
MAX_AGES = 1 << 16  # distinct ages whose decay factors scores() tabulates; a wider spread is scored in numpy


def decayed(values: np.ndarray, last_seen: np.ndarray, current_pass: int, decay: float) -> np.ndarray:
    """Show or click counts as of ``current_pass``."""
    age = (current_pass - last_seen).astype(np.float32)
    return values * np.power(np.float32(decay), age, dtype=np.float32)


def score(show: np.ndarray, click: np.ndarray, nonclick_coeff: float, click_coeff: float) -> np.ndarray:
    """Paddle's show/click score: (show - click) * nonclick_coeff + click * click_coeff."""
    return (show - click) * np.float32(nonclick_coeff) + click * np.float32(click_coeff)


def select(
    cfg: EvictionConfig, *, show: np.ndarray, click: np.ndarray, last_seen: np.ndarray, current_pass: int,
    decay: float,
) -> np.ndarray:
    """Boolean mask of the rows to evict (arrays cover exactly the stored rows)."""
    n = last_seen.shape[0]
    evict = np.zeros(n, np.bool_)
    if cfg.ttl_passes is not None:
        evict |= (current_pass - last_seen) > cfg.ttl_passes
    need_score = cfg.delete_threshold is not None or (cfg.max_rows is not None and cfg.budget_order == "score")
    s = None
    if need_score:
        s = scores(cfg, show=show, click=click, last_seen=last_seen, current_pass=current_pass, decay=decay)
    if cfg.delete_threshold is not None:
        evict |= s < np.float32(cfg.delete_threshold)
    if cfg.max_rows is not None:
        survivors = np.flatnonzero(~evict)
        excess = survivors.shape[0] - cfg.max_rows
        if excess > 0:
            order_key = s[survivors] if cfg.budget_order == "score" else last_seen[survivors].astype(np.float32)
            # Lowest score (or oldest last_seen) first; ties broken by row for determinism.
            victims = survivors[np.lexsort((survivors, order_key))[:excess]]
            evict[victims] = True
    return evict


@kernel(**JIT)
def _decayed_scores(show: np.ndarray, click: np.ndarray, last_seen: np.ndarray, current_pass: int,
                    factors: np.ndarray, youngest: int, nonclick_coeff: np.float32, click_coeff: np.float32,
                    out: np.ndarray) -> None:
    """:func:`score` of the :func:`decayed` counts, row by row: ``factors[a - youngest]`` is
    the decay factor of age ``a``, computed by numpy, so each score is the same float32 as
    theirs."""
    for i in range(show.shape[0]):
        f = factors[current_pass - last_seen[i] - youngest]
        s = show[i] * f
        c = click[i] * f
        out[i] = (s - c) * nonclick_coeff + c * click_coeff


def scores(cfg: EvictionConfig, *, show: np.ndarray, click: np.ndarray, last_seen: np.ndarray, current_pass: int,
           decay: float) -> np.ndarray:
    """The decayed show/click :func:`score` of every row (float32): one pass over the rows with
    a table of the decay factor per age (``np.power`` per row is most of numpy's cost), or in
    numpy chunks when the ages spread wider than ``MAX_AGES``."""
    n = last_seen.shape[0]
    key = np.empty(n, np.float32)
    if n == 0:
        return key
    youngest, oldest = current_pass - int(last_seen.max()), current_pass - int(last_seen.min())
    if oldest - youngest < MAX_AGES:
        factors = np.power(np.float32(decay), np.arange(youngest, oldest + 1).astype(np.float32), dtype=np.float32)
        _decayed_scores(show, click, last_seen, current_pass, factors, youngest, np.float32(cfg.nonclick_coeff),
                        np.float32(cfg.click_coeff), key)
        return key
    for s in range(0, n, SCORE_CHUNK):  # in chunks: the temporaries stay small beside a byte budget
        e = s + SCORE_CHUNK
        seen = last_seen[s:e]
        key[s:e] = score(decayed(show[s:e], seen, current_pass, decay), decayed(click[s:e], seen, current_pass, decay),
                         cfg.nonclick_coeff, cfg.click_coeff)
    return key


def coldest(
    cfg: EvictionConfig, count: int, *, show: np.ndarray, click: np.ndarray, last_seen: np.ndarray,
    current_pass: int, decay: float, protected: np.ndarray,
) -> np.ndarray:
    """Rows of the ``count`` coldest rows (lowest decayed score, or oldest ``last_seen``, per
    ``cfg.budget_order``), never one in ``protected``: the byte budget's victims. One
    selection of the threshold key, not a sort; rows are indices into the given arrays, ties
    at the last score taken lowest row first."""
    n = last_seen.shape[0]
    if cfg.budget_order == "score":
        key = scores(cfg, show=show, click=click, last_seen=last_seen, current_pass=current_pass, decay=decay)
    else:
        key = last_seen.astype(np.float64)
    key[protected] = np.inf
    count = min(count, n - protected.shape[0])  # protected rows are distinct
    if count <= 0:
        return np.empty(0, np.int64)
    # The count-th lowest key picks them, found without an index per row (a radix select on the
    # float32 scores; the float64 ages partitioned)
    threshold = kth_smallest(key, count - 1) if key.dtype == np.float32 else np.partition(key, count - 1)[count - 1]
    victims = [np.flatnonzero(key < threshold)]
    need = count - victims[0].shape[0]
    for s in range(0, n, SCORE_CHUNK):  # ties at the threshold: the lowest rows
        if need <= 0:
            break
        tied = np.flatnonzero(key[s : s + SCORE_CHUNK] == threshold)[:need] + s
        victims.append(tied)
        need -= tied.shape[0]
    return np.concatenate(victims).astype(np.int64, copy=False)
