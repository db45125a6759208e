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
sums (the kernel: exports.popularity_rerank, which the training job replays too). A user without a
history is served the model's ranking: the prior added nothing for users new to the log (the weight for
them chosen on a validation split, bench/retrieval_ablation.py). ``weight`` 0 serves the model's ranking
to every user; ``weight: auto`` the weight the job chose on its latest records and wrote into the bundle
(trainer.prior_weight), as much as the counts helped its users' latest choices.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from core.errors import CorruptData
from exports.bundle import BundleManifest, load_popularity
from exports.popularity_rerank import AUTO_FALLBACK_WEIGHT, PriorScale, rerank_order
from logrecords.batch import Batch
from models.model_config import ModelConfig, ModelType


@dataclass(frozen=True)
class ItemCounts:
    """One bundle's decayed item counts: ``ids`` sorted, ``log_counts`` = log1p(count), as of event time ``as_of``."""

    ids: np.ndarray
    log_counts: np.ndarray
    as_of: float
    chosen_weight: float | None = None  # the weight the job chose for these counts (trainer.prior_weight), if any

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
    return ItemCounts(ids, np.log1p(np.maximum(counts, 0.0)).astype(np.float32), as_of, chosen_weight(man))


def chosen_weight(man: BundleManifest) -> float | None:
    """The weight the job chose and wrote into the bundle (None: a bundle without one); CorruptData when it is not
    a finite number in [0, 1e6] chosen for the standardized scale."""
    chosen = man.popularity_weight
    if chosen is None:
        return None
    w = chosen.get("weight")
    if (isinstance(w, bool) or not isinstance(w, int | float) or not 0.0 <= w <= 1e6
            or chosen.get("scale") != "standardized"):
        raise CorruptData(f"bundle {man.version}: popularity_weight must hold a weight in [0, 1e6] chosen for the "
                          f"standardized scale, got {chosen!r}")
    return float(w)


def served_weight(weight: float | Literal["auto"], counts: ItemCounts | None) -> float:
    """The weight served: a number as configured; ``auto``: the bundle's chosen weight, else AUTO_FALLBACK_WEIGHT."""
    if weight != "auto":
        return float(weight)
    return AUTO_FALLBACK_WEIGHT if counts is None or counts.chosen_weight is None else counts.chosen_weight


def has_history(batch: Batch, slot: str | None) -> bool:
    """Whether the (one-record) ``batch`` holds any item in the history ``slot``."""
    if slot is None or slot not in batch.slots:
        return False
    _, offsets = batch.slots[slot]
    return bool(offsets[1] > offsets[0])


def rerank(ids: np.ndarray, scores: np.ndarray, counts: ItemCounts, weight: float,
           temperature: float, scale: PriorScale = "standardized") -> tuple[np.ndarray, np.ndarray]:
    """The candidates ``ids`` by :func:`prior_scores`, best first (ties: the search's order), with those scores."""
    order, z = rerank_order(scores, counts.log1p_of(ids), weight, temperature, scale)
    return ids[order], z


def temperature_of(model: ModelConfig | None) -> float | None:
    """The retrieval softmax's temperature of a two_tower ``model`` (its served scores / it = its logits); else None."""
    if model is None or model.type is not ModelType.TWO_TOWER:
        return None
    return float(model.retrieval.temperature)
