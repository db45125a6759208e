"""What a learner of a planted log could reach with every item known exactly: the ceiling row of
``bench/retrieval.py``'s planted sets.

The oracle ranks by each user's true factor at the holdout's time, which no learner has: a user is
known only through the records they made. Here every item's true factor and popularity are given
(:class:`bench.retrieval_data.TrueItems`), and each holdout user's factor ``x`` is fit to the user's
own train records, the way ALS updates one user given the items, in two ways:

- **positives**: ``x`` maximises ``sum_j w_j log softmax(bias + V x)[i_j] - |x|^2 / (2 prior)`` over
  the user's positives ``i_j``; the ranking is ``bias + V x``;
- **every record**: the pick of every record by the same softmax, and its like by the generator's
  own like model, ``sigmoid(c V_i x + like_bias)`` with ``c = like_scale / pick_scale``; the
  ranking is the oracle's form, ``bias + V x + log sigmoid(c V x + like_bias)``.

The weights ``w_j`` halve every ``half_life`` records back from the newest (the users drift). Both
objectives are concave in ``x`` (a log-sum-exp, log-sigmoids and a quadratic), so Newton's method
finds the maximum. The best point of a small grid of (prior, half-life) is reported: it is chosen on
the holdout, which flatters the fit, as a ceiling should. It leaves out the user's attributes and
(on the session log) the session's own recency, so a learner could pass it a little; it bounds what
learning the items better can give a model that knows users through their records.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import numpy as np

from bench.retrieval_data import Interactions, Split, TrueItems
from bench.retrieval_metrics import cut_excluding, score_lists

PRIORS = (3.0, 10.0)
HALF_LIVES = (10.0, 15.0, 25.0)  # records (positives, for the positives' fit) back from the newest
MODES = ("positives", "every record")


def _sigmoid(a: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * a))  # no overflow warning at large |a|


def _log_sigmoid(a: np.ndarray) -> np.ndarray:
    return -np.logaddexp(0.0, -a)


@dataclass(frozen=True)
class UserRecords:
    """One user's train records, oldest first: catalogue rows and labels."""

    rows: np.ndarray  # int64
    likes: np.ndarray  # float64, 1 = liked


def objective(x: np.ndarray, items: TrueItems, user: UserRecords, weights: np.ndarray, prior: float,
              every_record: bool) -> float:
    """The fit's objective at ``x`` (the module docstring): the slow reference the tests check :func:`fit` with."""
    z = items.bias + items.factors @ x
    log_norm = np.logaddexp.reduce(z)
    total = float((weights * (z[user.rows] - log_norm)).sum()) - float(x @ x) / (2.0 * prior)
    if every_record:
        c = items.like_scale / items.pick_scale
        a = c * (items.factors[user.rows] @ x) + items.like_bias
        total += float((weights * (user.likes * _log_sigmoid(a) + (1.0 - user.likes) * _log_sigmoid(-a))).sum())
    return total


def fit(items: TrueItems, user: UserRecords, weights: np.ndarray, prior: float, every_record: bool,
        iters: int = 20) -> np.ndarray:
    """The ``x`` maximising :func:`objective` (Newton's method; zeros for a user without records)."""
    v = items.factors
    dim = v.shape[1]
    x = np.zeros(dim)
    if user.rows.shape[0] == 0:
        return x
    mine = v[user.rows]
    chosen = weights @ mine  # the picks' side of the gradient: constant in x
    total = weights.sum()
    c = items.like_scale / items.pick_scale
    eye = np.eye(dim) / prior
    for _ in range(iters):
        z = items.bias + v @ x
        p = np.exp(z - z.max())
        p /= p.sum()
        mean = p @ v
        grad = chosen - total * mean - x / prior
        hess = total * ((v * p[:, None]).T @ v - np.outer(mean, mean)) + eye
        if every_record:
            s = _sigmoid(c * (mine @ x) + items.like_bias)
            grad += c * ((weights * (user.likes - s)) @ mine)
            hess += (c * c) * (mine * (weights * s * (1.0 - s))[:, None]).T @ mine
        step = np.linalg.solve(hess, grad)
        x += step
        if np.abs(step).max() < 1e-9:
            break
    return x


def ranking_scores(items: TrueItems, x: np.ndarray, every_record: bool) -> np.ndarray:
    """Each item's score for a user fit to ``x``: the fit's own log-probability of a pick (and a like)."""
    aff = items.factors @ x
    z = items.bias + aff
    if every_record:
        z = z + _log_sigmoid(items.like_scale / items.pick_scale * aff + items.like_bias)
    return z


def recency_weights(n: int, half_life: float) -> np.ndarray:
    """Weights of ``n`` records, oldest first, halved every ``half_life`` records back from the newest."""
    return 0.5 ** (np.arange(n)[::-1] / half_life)


def user_records(split: Split, items: TrueItems, every_record: bool) -> dict[int, UserRecords]:
    """Each train user's records (or positives) as catalogue rows, oldest first."""
    row = {int(i): k for k, i in enumerate(items.ids.tolist())}
    by_user: dict[int, tuple[list[int], list[float]]] = {}
    train = split.train
    for u, i, y in zip(train.user.tolist(), train.item.tolist(), train.label.tolist(), strict=True):
        if (every_record or y) and i in row:
            rows, likes = by_user.setdefault(u, ([], []))
            rows.append(row[i])
            likes.append(float(y > 0))
    return {u: UserRecords(np.array(r, np.int64), np.array(y)) for u, (r, y) in by_user.items()}


def ceiling_lists(split: Split, items: TrueItems, records: dict[int, UserRecords], every_record: bool, prior: float,
                  half_life: float, k: int = 10) -> dict[int, list[int]]:
    """Each holdout user's top ``k`` by the fit from the user's train ``records`` (:func:`user_records`), train
    items excluded."""
    empty = UserRecords(np.zeros(0, np.int64), np.zeros(0))
    lists: dict[int, list[int]] = {}
    for user in sorted(split.truth):
        mine = records.get(user, empty)
        x = fit(items, mine, recency_weights(mine.rows.shape[0], half_life), prior, every_record)
        seen = split.seen.get(user, ())
        order = np.argsort(-ranking_scores(items, x, every_record))[: k + len(seen)]
        lists[user] = cut_excluding(items.ids[order].tolist(), seen, k)
    return lists


def ceiling(log: Interactions, split: Split, k: int = 10) -> dict[str, Any] | None:
    """The best recall@``k`` of each mode over the grid, with its point (None: the log has no true items)."""
    items = log.true_items
    if items is None:
        return None
    out: dict[str, Any] = {}
    for mode in MODES:
        every_record = mode == "every record"
        records = user_records(split, items, every_record)  # once per mode: every grid point fits the same records
        best: dict[str, Any] | None = None
        for prior, half_life in itertools.product(PRIORS, HALF_LIVES):
            lists = ceiling_lists(split, items, records, every_record, prior, half_life, k)
            recall = score_lists(lists, split.truth, k=k, catalogue=len(split.catalogue))["recall"]
            if best is None or recall > best["recall"]:
                best = {"recall": recall, "prior": prior, "half_life": half_life}
        out[mode] = best
    return out
