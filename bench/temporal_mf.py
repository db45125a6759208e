"""A batch baseline of ``bench/retrieval.py``: matrix factorisation trained with the full softmax
over the catalogue for several epochs, each user's vector with a linear time trend.

It is the streaming two_tower's loss family fit the way a batch learner can: every train positive
seen ``epochs`` times in shuffled order, the exact softmax over every item (no sampled negatives,
no logQ estimate), so it shows what one pass over the stream gives up to a fit over all of it. The time
trend is Koren's "Collaborative filtering with temporal dynamics" (KDD 2009) user factor drift,
``p_u(t) = a_u + t * b_u``, with ``t`` the event's time as a share of the train part's span and
the lists made for the holdout's median time (a recommender knows when it serves).

The model, for user u at time t and item i: ``score = (a_u + t b_u) . v_i + c_i``; the loss is
the mean over positives of ``-log softmax(score)[i]`` plus ``l2 / 2`` times the squared norm of
the rows of the batch. Adam, numpy only, one thread's worth of work (seconds on these sets).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bench.retrieval_data import Split
from bench.retrieval_metrics import cut_excluding


# Tuned on the holdouts (bench/RESULTS.md), so it flatters the baseline, not streamrec.
@dataclass(frozen=True)
class TemporalMFSpec:
    dim: int = 16
    epochs: int = 15
    lr: float = 0.01
    batch: int = 512
    l2: float = 1e-4
    seed: int = 0
    trend: bool = True  # False: a static user vector (b stays 0)
    shuffle: bool = True  # False: the positives in time order, as one pass over the stream sees them


@dataclass
class Params:
    a: np.ndarray  # users x dim: the vector at t = 0
    b: np.ndarray  # users x dim: its change per unit of t
    v: np.ndarray  # items x dim
    c: np.ndarray  # items: the bias

    def arrays(self) -> dict[str, np.ndarray]:
        return {"a": self.a, "b": self.b, "v": self.v, "c": self.c}


def user_vectors(p: Params, users: np.ndarray, t: np.ndarray) -> np.ndarray:
    return p.a[users] + t[:, None] * p.b[users]


def loss_and_grads(p: Params, users: np.ndarray, items: np.ndarray, t: np.ndarray,
                   l2: float) -> tuple[float, dict[str, np.ndarray]]:
    """The batch's mean softmax loss and its gradient for every array (dense, zero off the batch)."""
    x = user_vectors(p, users, t)
    logits = x @ p.v.T + p.c
    logits -= logits.max(axis=1, keepdims=True)
    prob = np.exp(logits)
    prob /= prob.sum(axis=1, keepdims=True)
    n = len(items)
    rows = np.arange(n)
    loss = float(-np.log(prob[rows, items]).mean())
    g = prob  # d loss / d logits = (softmax - one-hot) / n
    g[rows, items] -= 1.0
    g /= n
    gx = g @ p.v
    grads = {"a": np.zeros_like(p.a), "b": np.zeros_like(p.b), "v": g.T @ x, "c": g.sum(axis=0)}
    np.add.at(grads["a"], users, gx)
    np.add.at(grads["b"], users, t[:, None] * gx)
    if l2:
        u, i = np.unique(users), np.unique(items)
        loss += 0.5 * l2 * float((p.a[u] ** 2).sum() + (p.b[u] ** 2).sum() + (p.v[i] ** 2).sum())
        grads["a"][u] += l2 * p.a[u]
        grads["b"][u] += l2 * p.b[u]
        grads["v"][i] += l2 * p.v[i]
    return loss, grads


def fit(users: np.ndarray, items: np.ndarray, t: np.ndarray, n_users: int, n_items: int,
        spec: TemporalMFSpec = TemporalMFSpec()) -> Params:
    """Fit on positives (dense user and item indices, times in [0, 1])."""
    rng = np.random.default_rng(spec.seed)
    p = Params(a=(0.01 * rng.normal(size=(n_users, spec.dim))).astype(np.float32),
               b=np.zeros((n_users, spec.dim), np.float32),
               v=(0.01 * rng.normal(size=(n_items, spec.dim))).astype(np.float32),
               c=np.zeros(n_items, np.float32))
    t = t.astype(np.float32)
    first = {k: np.zeros_like(x) for k, x in p.arrays().items()}
    second = {k: np.zeros_like(x) for k, x in p.arrays().items()}
    beta1, beta2, step = 0.9, 0.999, 0
    for _ in range(spec.epochs):
        order = rng.permutation(len(items)) if spec.shuffle else np.arange(len(items))
        for start in range(0, len(order), spec.batch):
            idx = order[start:start + spec.batch]
            _, grads = loss_and_grads(p, users[idx], items[idx], t[idx], spec.l2)
            step += 1
            for name, x in p.arrays().items():
                if name == "b" and not spec.trend:
                    continue
                first[name] = beta1 * first[name] + (1 - beta1) * grads[name]
                second[name] = beta2 * second[name] + (1 - beta2) * grads[name] ** 2
                x -= spec.lr * (first[name] / (1 - beta1 ** step)) / (np.sqrt(second[name] / (1 - beta2 ** step))
                                                                     + 1e-8)
    return p


def temporal_mf_lists(split: Split, fallback: dict[int, list[int]], k: int = 10,
                      spec: TemporalMFSpec = TemporalMFSpec(), every: bool = False) -> dict[int, list[int]]:
    """Each holdout user's top ``k`` at the holdout's median time, less the user's train items; a
    user unknown to the train part gets ``fallback`` (the popularity list, as the other baselines).
    Fit on the train positives, or with ``every`` on every train record (a rating is a choice)."""
    train = split.train
    pos = np.ones(len(train), bool) if every else train.label == 1
    known = np.unique(train.user)
    items = split.catalogue
    t0, t1 = float(train.time[0]), float(train.time[-1])
    span = max(t1 - t0, 1.0)
    p = fit(np.searchsorted(known, train.user[pos]), np.searchsorted(items, train.item[pos]),
            (train.time[pos] - t0) / span, len(known), len(items), spec)
    now = np.float32((float(np.median(split.test.time)) - t0) / span)
    lists = dict(fallback)
    holdout = np.array(sorted(split.truth), np.int64)
    holdout = holdout[np.isin(holdout, known)]
    if len(holdout) == 0:
        return lists
    rows = np.searchsorted(known, holdout)
    scores = user_vectors(p, rows, np.full(len(rows), now, np.float32)) @ p.v.T + p.c
    for r, u in enumerate(holdout.tolist()):
        seen = split.seen.get(u, ())
        top = np.argsort(-scores[r])[: k + len(seen)]
        lists[u] = cut_excluding(items[top].tolist() + fallback[u], seen, k)
    return lists
