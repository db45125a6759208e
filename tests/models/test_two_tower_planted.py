"""two_tower learns a planted preference: on a small planted interaction stream, the softmax
with logQ ranks the held-out liked items far better than the click loss alone (recall@10)."""

from __future__ import annotations

import numpy as np

from bench.retrieval_loss import model_config, model_scores, planted_stream, recall_at_k, train


def test_softmax_recalls_the_planted_preference_better_than_pointwise() -> None:
    stream = planted_stream(20_000, n_users=300, n_items=200, seed=0)
    recall = {}
    for name, retrieval in {"pointwise": {"loss": "pointwise", "normalize": False},
                            "softmax": {"loss": "softmax", "logq": True, "normalize": True}}.items():
        model, store, _ = train(stream, model_config(retrieval))
        recall[name] = recall_at_k(stream, lambda users, m=model, s=store: model_scores(m, s, stream, users))
    liked = stream.labels[: stream.split] > 0.5
    popular = np.bincount(stream.items[: stream.split][liked], minlength=200).astype(np.float64)
    recall["popularity"] = recall_at_k(stream, lambda users: np.tile(popular, (len(users), 1)))
    recall["oracle"] = recall_at_k(stream, lambda users: stream.truth[users])
    assert recall["softmax"] > 1.5 * recall["pointwise"], recall
    assert recall["softmax"] > recall["popularity"], recall
    assert recall["softmax"] < recall["oracle"], recall
