"""Folding a user in: the user's vector fit to the user's own positives with every item vector held
fixed, the way ALS updates one user given the items (Hu, Koren and Volinsky, ICDM 2008), here for
the softmax over the catalogue that two_tower's retrieval loss approximates.

For base scores ``s`` (one per catalogue item: a prior centre, e.g. the served user's scores, or
the items' popularity), item vectors ``V`` and the user's positives ``i_1..i_n`` with weights
``w_j``, :func:`fold_in` returns the ``x`` maximising

    sum_j w_j log softmax(s + V x)[i_j] - |x|^2 / (2 prior)

by Newton's method (the objective is concave: a log-sum-exp plus a quadratic). ``bench/retrieval_ceiling.py``
uses it to ask what planted's users allow: with the generator's true item vectors it is the best
a learner could do for a user from the positives it keeps; with the served vectors, whether the
served user vectors leave anything on the table.
"""

from __future__ import annotations

import numpy as np


def objective(x: np.ndarray, base: np.ndarray, vectors: np.ndarray, positives: np.ndarray, weights: np.ndarray,
              prior: float) -> float:
    """The fold-in's objective at ``x`` (the slow reference the tests check :func:`fold_in` with)."""
    z = base + vectors @ x
    top = z.max()
    log_norm = top + np.log(np.exp(z - top).sum())
    return float((weights * (z[positives] - log_norm)).sum() - x @ x / (2.0 * prior))


def fold_in(base: np.ndarray, vectors: np.ndarray, positives: np.ndarray, weights: np.ndarray | None = None, *,
            prior: float, iters: int = 10) -> np.ndarray:
    """The MAP correction ``x`` (``vectors.shape[1]``): the ranking is then ``base + vectors @ x``.

    ``positives``: catalogue rows of the user's positives; ``weights``: one per positive (default 1).
    """
    base = np.asarray(base, np.float64)
    vectors = np.asarray(vectors, np.float64)
    positives = np.asarray(positives, np.int64)
    w = np.ones(positives.shape[0]) if weights is None else np.asarray(weights, np.float64)
    if positives.ndim != 1 or w.shape != positives.shape:
        raise ValueError(f"positives and weights must be two vectors of one length: {positives.shape}, {w.shape}")
    if prior <= 0.0:
        raise ValueError(f"prior must be > 0: {prior}")
    dim = vectors.shape[1]
    x = np.zeros(dim)
    if positives.shape[0] == 0:
        return x
    chosen = w @ vectors[positives]  # the positives' side of the gradient: constant in x
    total = w.sum()
    eye = np.eye(dim) / prior
    for _ in range(iters):
        z = base + vectors @ x
        p = np.exp(z - z.max())
        p /= p.sum()
        mean = p @ vectors
        grad = chosen - total * mean - x / prior
        cov = (vectors * p[:, None]).T @ vectors - np.outer(mean, mean)
        step = np.linalg.solve(total * cov + eye, grad)
        x += step
        if np.abs(step).max() < 1e-10:
            break
    return x


def recency_weights(n: int, half_life: float) -> np.ndarray:
    """Weights of a user's ``n`` positives, oldest first: halved every ``half_life`` positives back
    from the newest (0: all 1)."""
    if half_life <= 0.0:
        return np.ones(n)
    return 0.5 ** (np.arange(n)[::-1] / half_life)
