"""The served popularity prior: a known user's candidates re-ranked by what is popular now.

A bundle carries each item's record count decayed by event time, summed over the job's trainers
(exports.bundle ``popularity.arrays``, models.item_popularity). For a user with a history (the
request's history slot holds items once the service completed it, service.user_history), the
top ``candidates`` of the Faiss search are re-ranked by

    score + temperature * weight * log1p(count)

that is the model's logit (score / temperature, the retrieval softmax's) plus ``weight *
log1p(count)``, scaled back to the score's units; the answer's scores are these. A user without a
history is served the model's ranking: the prior added nothing for users new to the log (the weight
for them chosen on a validation split, bench/retrieval_ablation.py). ``weight`` 0 serves the model's
ranking to every user.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

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


def rerank(ids: np.ndarray, scores: np.ndarray, counts: ItemCounts, weight: float,
           temperature: float) -> tuple[np.ndarray, np.ndarray]:
    """The candidates ``ids`` by ``scores + temperature * weight * log1p(count)``, best first (ties: the search's
    order), with those scores."""
    z = (scores + np.float32(temperature * weight) * counts.log1p_of(ids)).astype(np.float32)
    order = np.argsort(-z, kind="stable")
    return ids[order], z[order]


def temperature_of(model: ModelConfig | None) -> float | None:
    """The retrieval softmax's temperature of a two_tower ``model`` (its served scores / it = its logits); else None."""
    if model is None or model.type is not ModelType.TWO_TOWER:
        return None
    return float(model.retrieval.temperature)
