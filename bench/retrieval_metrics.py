"""Scoring of top-k lists for ``bench/retrieval.py``: recall, hit rate, NDCG and catalogue coverage.

Every method's lists are scored by the same functions on the same holdout. A user's relevant set
is the items they rated positively in the holdout less every item they interacted with in the
train part (those are excluded from every list, so counting them would only reward the methods
that forget to exclude them). Lists longer than ``k`` are cut to ``k`` before scoring: implicit
0.7.3's item-kNN ``recommend(N, filter_items=F)`` returns N + len(F) ids (implicit#736).

- recall@k: hits in the top k / size of the relevant set, averaged over users.
- hit-rate@k: share of users with at least one hit.
- NDCG@k: binary gains, DCG = sum over hits of 1/log2(rank + 1), divided by the DCG of an ideal
  list (min(k, |relevant|) hits at the top).
- coverage: distinct items in all the lists / items in the catalogue (those seen in train).

For users with nothing in train (and no attributes), any system can only show a list shared by
all of them. ``best_shared_list`` finds, in hindsight, the shared list with the highest mean
recall@k on a set of users: recall is additive over a list's items, so it is the top k items by
the sum over those users of 1/|relevant| for each user who likes the item. No method that learns
from the train part alone can score higher on them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np


def cut_excluding(ids: Iterable[int], exclude: Iterable[int], n: int) -> list[int]:
    """The first ``n`` of ``ids`` that are not in ``exclude``, in order, without duplicates."""
    banned = set(int(x) for x in exclude)
    out: list[int] = []
    for i in ids:
        i = int(i)
        if i < 0 or i in banned:
            continue  # -1: padding of a short list
        banned.add(i)
        out.append(i)
        if len(out) == n:
            break
    return out


def user_scores(recommended: Sequence[int], relevant: set[int], k: int) -> tuple[float, float, float]:
    """(recall, hit, ndcg) of one user's list cut to ``k``."""
    if not relevant:
        raise ValueError("a scored user needs at least one relevant item")
    top = list(recommended)[:k]
    gains = np.array([1.0 if i in relevant else 0.0 for i in top])
    hits = float(gains.sum())
    dcg = float((gains / np.log2(np.arange(2, len(top) + 2))).sum()) if top else 0.0
    ideal = float((1.0 / np.log2(np.arange(2, min(k, len(relevant)) + 2))).sum())
    return hits / len(relevant), float(hits > 0), dcg / ideal


def score_lists(lists: Mapping[int, Sequence[int]], truth: Mapping[int, set[int]], *, catalogue: int,
                k: int = 10, subset: Iterable[int] | None = None) -> dict[str, float | int]:
    """Mean recall@k, hit-rate@k, NDCG@k over the users of ``truth`` (or of ``subset`` of them),
    and coverage of ``catalogue`` items by the lists. A user without a list scores 0."""
    users = list(truth) if subset is None else [u for u in subset if u in truth]
    if not users:
        return {"users": 0, "recall": float("nan"), "hit_rate": float("nan"), "ndcg": float("nan"),
                "coverage": float("nan")}
    per_user = np.array([user_scores(lists.get(u, ()), truth[u], k) for u in users])
    shown = {int(i) for u in users for i in list(lists.get(u, ()))[:k]}
    return {"users": len(users), "recall": float(per_user[:, 0].mean()), "hit_rate": float(per_user[:, 1].mean()),
            "ndcg": float(per_user[:, 2].mean()), "coverage": len(shown) / catalogue if catalogue else float("nan")}


def best_shared_list(truth: Mapping[int, set[int]], users: Iterable[int], candidates: Iterable[int],
                     k: int) -> tuple[list[int], float]:
    """(the k ``candidates`` that one list shown to every one of ``users`` would need for the highest
    mean recall@k over them, that mean recall). Users without relevant items are left out."""
    scored = [u for u in users if truth.get(u)]
    if not scored:
        return [], float("nan")
    allowed = {int(i) for i in candidates}
    weight: dict[int, float] = {}
    for u in scored:
        share = 1.0 / len(truth[u])
        for i in truth[u]:
            if int(i) in allowed:
                weight[int(i)] = weight.get(int(i), 0.0) + share
    top = sorted(weight, key=lambda i: (-weight[i], i))[:k]
    return top, sum(weight[i] for i in top) / len(scored)


def auc(labels: np.ndarray, scores: np.ndarray) -> float:
    """Area under the ROC curve (ties count one half); NaN without both classes."""
    labels = np.asarray(labels, bool)
    pos, neg = int(labels.sum()), int((~labels).sum())
    if pos == 0 or neg == 0:
        return float("nan")
    order = np.argsort(scores, kind="mergesort")
    ranks = np.empty(len(scores), np.float64)
    s = np.asarray(scores)[order]
    # average ranks over ties
    starts = np.r_[0, np.flatnonzero(s[1:] != s[:-1]) + 1]
    ends = np.r_[starts[1:], len(s)]
    for a, b in zip(starts, ends, strict=True):
        ranks[order[a:b]] = (a + b + 1) / 2.0
    return float((ranks[labels].sum() - pos * (pos + 1) / 2.0) / (pos * neg))
