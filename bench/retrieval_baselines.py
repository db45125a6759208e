"""Baselines of ``bench/retrieval.py``, trained on the train part of the same split, each on its
positives and again on every record (``EVERY_RECORD``: a label-0 rating is still a film the user
chose to watch, which is what streamrec's softmax learns from with ``retrieval.label0_weight``):
the most popular items, the most popular lately (positives decayed by their age in events: the
strong simple baseline of a log that drifts), item-kNN (cosine, K neighbours), ALS and BPR from
``implicit`` (bench extra only, never a runtime dependency), and a batch fit of the streaming
model's own loss family: full-softmax matrix factorisation with a per-user time trend over several
epochs (:mod:`bench.temporal_mf`).

Every list excludes the user's train items (of any label) and is cut to ``k``
(:func:`bench.retrieval_metrics.cut_excluding`: implicit 0.7.3's item-kNN returns N + len(F) ids
when given ``filter_items``). A holdout user unknown to the train part gets the popularity list:
these baselines have nothing else for them (streamrec has the user's attributes); a list shorter
than ``k`` (a user without train positives, items without neighbours) is padded with it.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np

from bench.retrieval_data import Split
from bench.retrieval_metrics import cut_excluding
from bench.temporal_mf import TemporalMFSpec, temporal_mf_lists

Lists = dict[int, list[int]]


EVERY_RECORD = ", every record"  # a baseline's name + this: trained on every train record, not its positives alone


def trained_on(split: Split, every: bool) -> np.ndarray:
    """Indices of the train records a baseline learns from: its positives, or all of them."""
    return np.arange(len(split.train)) if every else np.flatnonzero(split.train.label == 1)


def popularity(split: Split, k: int = 10, every: bool = False) -> Lists:
    """The train part's most liked (``every``: most rated) items, less each user's own."""
    order = [i for i, _ in Counter(split.train.item[trained_on(split, every)].tolist()).most_common()]
    return {u: cut_excluding(order, split.seen.get(u, ()), k) for u in split.truth}


# The recent popularity's half-life, as a share of the train part's events: chosen after seeing MovieLens 100K's
# holdout (bench/RESULTS.md), so it flatters the baseline, not streamrec.
RECENT_HALF_LIFE = 0.025
RECENT_NAME = "recent popularity (decayed)"  # positives weighted by age: RECENT_HALF_LIFE
TEMPORAL_MF_NAME = "softmax MF + time trend (batch)"  # bench.temporal_mf, TemporalMFSpec's defaults
# beyond the target's named baselines (popularity, item-kNN, ALS, BPR): ours to beat too
EXTRA_BASELINES = (RECENT_NAME, TEMPORAL_MF_NAME)


def decayed_counts(split: Split, half_life: float | None = RECENT_HALF_LIFE,
                   every: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(items, score): the train part's items with their positives (``every``: records) weighted
    ``0.5 ** (age / (half_life * events))``, where ``age`` counts the train events after each one
    (``half_life`` None: every one weighs 1)."""
    train = split.train
    n = len(train)
    pos = trained_on(split, every)
    weight = np.ones(len(pos)) if half_life is None else 0.5 ** ((n - 1 - pos) / max(1.0, half_life * n))
    items, at = np.unique(train.item[pos], return_inverse=True)
    score = np.zeros(items.shape[0])
    np.add.at(score, at, weight)
    return items, score


def recent_popularity(split: Split, k: int = 10, half_life: float = RECENT_HALF_LIFE, every: bool = False) -> Lists:
    """The train part's items by :func:`decayed_counts`: what is liked now, less each user's own."""
    items, score = decayed_counts(split, half_life, every)
    order = items[np.lexsort((items, -score))].tolist()  # ties by id: a stable list
    return {u: cut_excluding(order, split.seen.get(u, ()), k) for u in split.truth}


class Matrix:
    """The train positives (``every``: records) as a users x items CSR matrix over dense indices."""

    def __init__(self, split: Split, every: bool = False) -> None:
        from scipy.sparse import csr_matrix

        pos = trained_on(split, every)
        self.users = np.unique(split.train.user)
        self.items = split.catalogue
        rows = np.searchsorted(self.users, split.train.user[pos])
        cols = np.searchsorted(self.items, split.train.item[pos])
        self.csr = csr_matrix((np.ones(len(rows), np.float32), (rows, cols)),
                              shape=(len(self.users), len(self.items)))
        self.csr.sum_duplicates()
        self.csr.data[:] = 1.0

    def row_of(self, user: int) -> int | None:
        r = int(np.searchsorted(self.users, user))
        return r if r < len(self.users) and self.users[r] == user else None


def _implicit_lists(split: Split, model: Any, matrix: Matrix, k: int, fallback: Lists) -> Lists:
    lists: Lists = {}
    known = [(u, r) for u in split.truth if (r := matrix.row_of(u)) is not None]
    for u in split.truth:
        lists[u] = fallback[u]
    if not known:
        return lists
    rows = np.array([r for _, r in known])
    n = min(len(matrix.items), k + max(len(split.seen.get(u, ())) for u, _ in known))
    ids, _ = model.recommend(rows, matrix.csr[rows], N=n, filter_already_liked_items=False)
    for (u, _), row in zip(known, np.atleast_2d(ids), strict=True):
        raw = [int(matrix.items[i]) for i in row if 0 <= i < len(matrix.items)]
        # a short list (no positive in train, no neighbours) is padded with the popular items
        lists[u] = cut_excluding(raw + fallback[u], split.seen.get(u, ()), k)
    return lists


def implicit_models(seed: int = 0) -> dict[str, Callable[[], Any]]:
    from implicit.cpu.als import AlternatingLeastSquares
    from implicit.cpu.bpr import BayesianPersonalizedRanking
    from implicit.nearest_neighbours import CosineRecommender

    return {
        "item-kNN (cosine, K=50)": lambda: CosineRecommender(K=50),
        "ALS (implicit, 32 factors)": lambda: AlternatingLeastSquares(factors=32, regularization=0.05, iterations=15,
                                                                      random_state=seed, num_threads=1),
        "BPR (implicit, 64 factors)": lambda: BayesianPersonalizedRanking(factors=64, iterations=100,
                                                                          random_state=seed, num_threads=1),
    }


def baseline_lists(split: Split, k: int = 10, seed: int = 0) -> dict[str, Lists]:
    """Every baseline's lists for the holdout users of ``split``, trained on the positives and (names
    ending in ``EVERY_RECORD``) on every record; a user unknown to train gets the positives' popularity."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # implicit warns (and slows) with threaded BLAS
    pop = popularity(split, k)
    out: dict[str, Lists] = {}
    for every in (False, True):
        suffix = EVERY_RECORD if every else ""
        out["popularity" + suffix] = popularity(split, k, every)
        out[RECENT_NAME + suffix] = recent_popularity(split, k, every=every)
        matrix = Matrix(split, every)
        for name, make in implicit_models(seed).items():
            model = make()
            model.fit(matrix.csr, show_progress=False)
            out[name + suffix] = _implicit_lists(split, model, matrix, k, pop)
        out[TEMPORAL_MF_NAME + suffix] = temporal_mf_lists(split, pop, k, TemporalMFSpec(seed=seed), every=every)
    return out
