"""The served popularity prior: a known user's candidates re-ranked by what is popular now.

A bundle carries each item's record count decayed by event time, summed over the job's trainers
(exports.bundle ``popularity.arrays``, models.item_popularity). For a user with a history (the
request's history slot holds items once the service completed it, service.user_history), the
top ``candidates`` items of the Faiss search besides the request's exclusions are re-ranked by one of

    standardized:  z(score) + weight * z(log1p(count))     z(x) = (x - mean(x)) / std(x) over the candidates
    logit:         score + temperature * weight * log1p(count)

``standardized`` (the default) compares the model's ranking and the prior in units of their own spread
over the request's candidates, so the weight means the same whatever scale the run's logits took (it
differs between runs of one config) and however many records the counts hold; a term that does not vary
over the candidates adds nothing. ``logit`` adds ``weight * log1p(count)`` to the model's logit (score /
temperature, the retrieval softmax's), scaled back to the score's units. The answer's scores are these
sums. A user without a history is served the model's ranking: the prior added nothing for users new to
the log (the weight for them chosen on a validation split, bench/retrieval_ablation.py). ``weight`` 0
serves the model's ranking to every user.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from exports.bundle import BundleManifest, load_popularity
from logrecords.batch import Batch
from models.model_config import ModelConfig, ModelType


@dataclass(frozen=True)
class ItemCounts:
    """One bundle's decayed item counts: ``ids`` sorted, ``log_counts`` = log1p(count), as of event time ``as_of``."""

    ids: np.ndarray
    log_counts: np.ndarray
    as_of: float

    def log1p_of(self, ids: np.ndarray) -> np.ndarray:
        """log1p(count) of each of ``ids`` (0 for an item without a count)."""
        if self.ids.shape[0] == 0:
            return np.zeros(ids.shape[0], np.float32)
        at = np.minimum(np.searchsorted(self.ids, ids), self.ids.shape[0] - 1)
        return np.where(self.ids[at] == ids, self.log_counts[at], np.float32(0.0))


def item_counts(root: Path, man: BundleManifest) -> ItemCounts | None:
    """The bundle's counts (None when it has none: a bundle of another model, or written before they were added)."""
    loaded = load_popularity(root, man)
    if loaded is None:
        return None
    ids, counts, as_of = loaded
    return ItemCounts(ids, np.log1p(np.maximum(counts, 0.0)).astype(np.float32), as_of)


def has_history(batch: Batch, slot: str | None) -> bool:
    """Whether the (one-record) ``batch`` holds any item in the history ``slot``."""
    if slot is None or slot not in batch.slots:
        return False
    _, offsets = batch.slots[slot]
    return bool(offsets[1] > offsets[0])


PriorScale = Literal["standardized", "logit"]


def standardized(x: np.ndarray) -> np.ndarray:
    """``(x - mean(x)) / std(x)`` in float32 (0 where ``x`` does not vary: a constant term ranks nothing)."""
    x = np.asarray(x, np.float64)
    if x.shape[0] == 0:
        return np.zeros(0, np.float32)
    centred = x - x.mean()
    sd = float(np.sqrt(np.mean(centred * centred)))
    if not sd > 1e-12 * max(1.0, float(np.abs(x).max())):
        return np.zeros(x.shape[0], np.float32)
    return (centred / sd).astype(np.float32)


def prior_scores(scores: np.ndarray, log_counts: np.ndarray, weight: float, temperature: float,
                 scale: PriorScale = "standardized") -> np.ndarray:
    """The candidates' re-ranking scores (the module docstring) from their ``scores`` and ``log1p(count)``."""
    if scale == "standardized":
        return standardized(scores) + np.float32(weight) * standardized(log_counts)
    if scale == "logit":
        return (scores + np.float32(temperature * weight) * log_counts).astype(np.float32)
    raise ValueError(f"popularity prior scale must be 'standardized' or 'logit', got {scale!r}")


def rerank(ids: np.ndarray, scores: np.ndarray, counts: ItemCounts, weight: float,
           temperature: float, scale: PriorScale = "standardized") -> tuple[np.ndarray, np.ndarray]:
    """The candidates ``ids`` by :func:`prior_scores`, best first (ties: the search's order), with those scores."""
    z = prior_scores(scores, counts.log1p_of(ids), weight, temperature, scale).astype(np.float32)
    order = np.argsort(-z, kind="stable")
    return ids[order], z[order]


def temperature_of(model: ModelConfig | None) -> float | None:
    """The retrieval softmax's temperature of a two_tower ``model`` (its served scores / it = its logits); else None."""
    if model is None or model.type is not ModelType.TWO_TOWER:
        return None
    return float(model.retrieval.temperature)
