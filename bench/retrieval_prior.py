"""The service's popularity prior (service.popularity_prior) replayed on a run's model-alone lists: its half-life
and weight chosen on the validation split (the train part's last 10% by time, never the holdout), then applied to
each holdout run with the service's own re-rank.

The counts are the service's: every train record of an item, decayed by event time with a half-life in seconds, as
of the newest train event (models.item_popularity, summed over the trainers). A user with a history (a train
positive: the history slot holds the user's positives) gets the top ``candidates`` of its model-alone list (their
exclusions already left out, as the service counts them) re-ranked by :func:`service.popularity_prior.rerank`;
anyone else keeps the model's ranking. The number of candidates is chosen too: an item popular now that the model
ranks low is re-ranked only if it is among them. ``--ablate`` passes the standardized scale's choice to the holdout
runs' config, so the served row is that choice served by the service.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bench.retrieval_data import Split
from bench.retrieval_metrics import score_lists
from service.popularity_prior import ItemCounts, PriorScale, rerank

DAY_S = 86400.0
HALF_LIVES_DAYS = (0.5, 1.0, 2.0, 3.0, 5.0, 7.0, 10.0, 14.0, 30.0)
CANDIDATES = (100, 300, 1000)  # the most is the model-alone list's length (bench.retrieval_ablation.WIDE)
WEIGHTS: dict[str, tuple[float, ...]] = {
    "standardized": (0.0, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 10.0),
    "logit": (0.0, 0.25, 0.5, 1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 16.0),
}

Scored = dict[int, tuple[np.ndarray, np.ndarray]]


@dataclass(frozen=True)
class ServedPrior:
    scale: PriorScale
    half_life_days: float
    weight: float
    candidates: int = 300


def event_time_counts(split: Split, half_life_s: float) -> ItemCounts:
    """The train part's items with their records weighted ``0.5 ** ((newest time - time) / half_life_s)``, as the
    trainers count them for the service."""
    train = split.train
    as_of = float(train.time.max())
    weights = np.exp2(-(as_of - train.time.astype(np.float64)) / half_life_s)
    items, inverse = np.unique(train.item, return_inverse=True)
    counts = np.bincount(inverse, weights=weights, minlength=items.shape[0])
    return ItemCounts(items.astype(np.uint64), np.log1p(counts).astype(np.float32), as_of)


def with_history(split: Split) -> set[int]:
    """Users with a train positive: those the service finds a history for."""
    train = split.train
    return set(np.unique(train.user[train.label > 0]).tolist())


def served_lists(scored: Scored, split: Split, prior: ServedPrior, temperature: float, k: int,
                 counts: ItemCounts | None = None, history: set[int] | None = None) -> dict[int, list[int]]:
    """Each user's top ``k`` as the service would serve them under ``prior`` from the model-alone ``scored``."""
    counts = counts or event_time_counts(split, prior.half_life_days * DAY_S)
    history = with_history(split) if history is None else history
    lists: dict[int, list[int]] = {}
    for u, (ids, scores) in scored.items():
        if prior.weight > 0 and u in history:
            c = max(k, prior.candidates)
            got, _ = rerank(ids[:c].astype(np.uint64), scores[:c].astype(np.float32), counts, prior.weight,
                            temperature, prior.scale)
            lists[u] = got[:k].astype(np.int64).tolist()
        else:
            lists[u] = ids[:k].tolist()
    return lists


def _recall(lists: dict[int, list[int]], split: Split, k: int) -> float:
    got = score_lists(lists, split.truth, catalogue=len(split.catalogue), k=k)
    return 0.0 if got["users"] == 0 else float(got["recall"])


def tune(scored: Scored, split: Split, temperature: float, k: int, scale: PriorScale) -> tuple[ServedPrior, float,
                                                                                                list[dict]]:
    """The half-life, weight and candidates of ``scale`` with the best recall@k on ``split`` (the validation split;
    ties: the shorter half-life, the smaller weight, the fewer candidates), that recall, and the best weight and
    candidates' recall at each half-life."""
    history = with_history(split)
    best: tuple[ServedPrior, float] | None = None
    grid: list[dict] = []
    for days in HALF_LIVES_DAYS:
        counts = event_time_counts(split, days * DAY_S)
        at_best: tuple[ServedPrior, float] | None = None
        for c in CANDIDATES:
            for w in WEIGHTS[scale]:
                prior = ServedPrior(scale, days, w, c)
                r = _recall(served_lists(scored, split, prior, temperature, k, counts, history), split, k)
                if at_best is None or r > at_best[1] + 1e-12:
                    at_best = (prior, r)
        assert at_best is not None
        grid.append({"half_life_days": days, "weight": at_best[0].weight, "candidates": at_best[0].candidates,
                     "recall": at_best[1]})
        if best is None or at_best[1] > best[1] + 1e-12:
            best = at_best
    assert best is not None
    return (*best, grid)
