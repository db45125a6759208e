"""AUC by ranks for the baseline scripts (they run in their own virtualenvs, without streamrec
installed, so they cannot import trainer.auc): ties count one half, as streamrec reports it."""

from __future__ import annotations

import numpy as np


def roc_auc(labels: np.ndarray, scores: np.ndarray) -> float:
    labels = labels.astype(bool)
    order = np.argsort(scores, kind="mergesort")
    s = scores[order]
    starts = np.flatnonzero(np.r_[True, s[1:] != s[:-1]])
    ends = np.r_[starts[1:], s.shape[0]]
    ranks = np.empty(s.shape[0])
    ranks[order] = np.repeat((starts + ends + 1) / 2.0, ends - starts)
    n_pos = int(labels.sum())
    return float((ranks[labels].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * (labels.shape[0] - n_pos)))
