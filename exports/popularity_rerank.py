"""The popularity prior's re-rank of a user's candidates: one pure kernel the service serves with
(service.popularity_prior) and the training job replays when it chooses the weight a bundle carries
(trainer.prior_weight), so both rank by the same sums.

Each row of candidates is re-ranked by one of

    standardized:  z(score) + weight * z(log1p(count))     z(x) = (x - mean(x)) / std(x) over the row
    logit:         score + temperature * weight * log1p(count)
"""

from __future__ import annotations

from typing import Literal

import numpy as np

PriorScale = Literal["standardized", "logit"]
DEFAULT_CANDIDATES = 1000  # the items re-ranked: the service's default, and the count the job's choice replays
# the service's default weight, and the one served under weight auto for a bundle that carries no chosen weight:
# MovieLens 100K's validation split's choice (bench/retrieval_prior.py)
AUTO_FALLBACK_WEIGHT = 3.0


def standardized(x: np.ndarray) -> np.ndarray:
    """``(x - mean(x)) / std(x)`` along the last axis in float32 (0 in a row that does not vary: a constant term
    ranks nothing)."""
    x = np.asarray(x, np.float64)
    if x.shape[-1] == 0:
        return np.zeros(x.shape, np.float32)
    centred = x - x.mean(axis=-1, keepdims=True)
    sd = np.sqrt(np.mean(centred * centred, axis=-1, keepdims=True))
    varies = sd > 1e-12 * np.maximum(1.0, np.abs(x).max(axis=-1, keepdims=True))
    return np.where(varies, centred / np.where(varies, sd, 1.0), 0.0).astype(np.float32)


def prior_terms(scores: np.ndarray, log_counts: np.ndarray, temperature: float,
                scale: PriorScale = "standardized") -> tuple[np.ndarray, np.ndarray]:
    """The model's term and the prior's per unit of weight, each row of a 2-D pair on its own: the re-ranking
    scores are ``model + weight * prior`` (the module docstring)."""
    if scale == "standardized":
        return standardized(scores), standardized(log_counts)
    if scale == "logit":
        return np.asarray(scores, np.float32), (np.float32(temperature) * np.asarray(log_counts, np.float32))
    raise ValueError(f"popularity prior scale must be 'standardized' or 'logit', got {scale!r}")


def prior_scores(scores: np.ndarray, log_counts: np.ndarray, weight: float, temperature: float,
                 scale: PriorScale = "standardized") -> np.ndarray:
    """The candidates' re-ranking scores (the module docstring) from their ``scores`` and ``log1p(count)``."""
    model, prior = prior_terms(scores, log_counts, temperature, scale)
    return (model + np.float32(weight) * prior).astype(np.float32)


def rerank_order(scores: np.ndarray, log_counts: np.ndarray, weight: float, temperature: float,
                 scale: PriorScale = "standardized") -> tuple[np.ndarray, np.ndarray]:
    """The positions of the candidates by :func:`prior_scores`, best first along the last axis (ties: their given
    order), and those scores in that order."""
    z = prior_scores(scores, log_counts, weight, temperature, scale)
    order = np.argsort(-z, axis=-1, kind="stable")
    return order, np.take_along_axis(z, order, axis=-1)
