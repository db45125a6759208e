"""Reference AUCs for a training benchmark on planted data, from the generator's hidden model.

- Bayes AUC: the true click probabilities on the test rows.
- Seen-id ceiling: the true logit of each test row with the terms of ids that never occur in
  the training rows removed (their hidden weight set to 0; the user x item interaction kept
  only when both the user and the item were seen). No learner can know an id it never saw,
  so this bounds what one pass over the training rows can reach — knowing every seen id's
  weight exactly, which a learner that saw an id a few times cannot: the real bound is lower.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from logrecords.generator import ITEM_SLOT, N_SPARSE, USER_SLOT, PlantedModel, Sample, roc_auc
from logrecords.sample_encoding import criteo_text

_CHUNK = 200_000


@dataclass(frozen=True)
class Planted:
    """What the benchmark files hold, and the reference AUCs of their test rows."""

    train: Path
    test: Path
    bayes_auc: float
    seen_id_ceiling_auc: float
    seen_id_ceiling_min10_auc: float  # ids seen at least 10 times in training


def _write(path: Path, model: PlantedModel, rows: int) -> list[Sample]:
    parts = []
    with open(path, "wb") as f:
        for start in range(0, rows, _CHUNK):
            sample = model.sample(min(_CHUNK, rows - start))
            f.write(criteo_text(sample)[0])
            parts.append(sample)
    return parts


def _ranks(model: PlantedModel, slot: int, raw: np.ndarray) -> np.ndarray:
    """Popularity ranks of raw ids (inverting the generator's per-slot scramble over the vocabulary)."""
    all_raw = model.raw_ids(slot, np.arange(int(model.vocab[slot]), dtype=np.int64))
    order = np.argsort(all_raw, kind="stable")
    pos = np.minimum(np.searchsorted(all_raw[order], raw), order.shape[0] - 1)
    return order[pos]


def seen_id_ceiling(model: PlantedModel, train: list[Sample], test: Sample, min_count: int = 1) -> float:
    """AUC of the true test logits without the terms of ids seen fewer than ``min_count`` times in ``train``."""
    prob = np.clip(test.prob, 1e-15, 1 - 1e-15)
    logit = np.log(prob) - np.log1p(-prob)
    seen = np.zeros((len(test), N_SPARSE), np.bool_)
    for s in range(N_SPARSE):
        ids, counts = np.unique(np.concatenate([t.sparse[~t.sparse_missing[:, s], s] for t in train]),
                                return_counts=True)
        seen[:, s] = np.isin(test.sparse[:, s], ids[counts >= min_count]) | test.sparse_missing[:, s]
        unseen = np.flatnonzero(~seen[:, s])
        logit[unseen] -= model.weights(s, _ranks(model, s, test.sparse[unseen, s]))
    lost = np.flatnonzero(~(seen[:, USER_SLOT] & seen[:, ITEM_SLOT]))
    u = model.vectors(USER_SLOT, _ranks(model, USER_SLOT, test.sparse[lost, USER_SLOT]))
    v = model.vectors(ITEM_SLOT, _ranks(model, ITEM_SLOT, test.sparse[lost, ITEM_SLOT]))
    logit[lost] -= np.sqrt(model.interaction_variance / model.rank) * np.einsum("ij,ij->i", u, v)
    return roc_auc(test.labels, logit)


def make_planted(directory: Path, train_rows: int, test_rows: int, seed: int) -> Planted:
    """Criteo-format train and test files from one PlantedModel (test rows are the later events)."""
    model = PlantedModel(seed=seed)
    if model.drift:
        raise ValueError("the seen-id ceiling assumes a model without drift")
    train, test = directory / "train.txt", directory / "test.txt"
    train_parts = _write(train, model, train_rows)
    t = _write(test, model, test_rows)
    joined = Sample(*(np.concatenate([getattr(p, f) for p in t]) for f in Sample.__dataclass_fields__))
    return Planted(train, test, bayes_auc=roc_auc(joined.labels, joined.prob),
                   seen_id_ceiling_auc=seen_id_ceiling(model, train_parts, joined),
                   seen_id_ceiling_min10_auc=seen_id_ceiling(model, train_parts, joined, min_count=10))
