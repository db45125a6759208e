"""The service's scoring API: Predictor over a lookup, and JSON instances to batches."""

from __future__ import annotations

import numpy as np
import pytest

from core.errors import InvalidInput
from exports.predictor import Predictor, instances_to_batch
from models import build_model
from models.layers import bce_with_logits
from tests.models.helpers import random_batch, small_config


def _lookup_table(model, seed=0):
    rng = np.random.default_rng(seed)
    store: dict[tuple[str, int], np.ndarray] = {}

    def lookup(table: str, keys: np.ndarray) -> np.ndarray:
        width = model.row_width[table]
        return np.stack([store.setdefault((table, int(k)), rng.normal(0, 0.3, width).astype(np.float32))
                         for k in keys]) if keys.size else np.zeros((0, width), np.float32)

    return lookup


@pytest.mark.parametrize("kind", ["lr", "wide_deep", "deepfm", "two_tower"])
def test_predictor_scores_like_the_trained_model(kind: str) -> None:
    cfg = small_config(kind)
    model = build_model(cfg)
    model.params.values[...] = np.random.default_rng(1).normal(0, 0.2, model.params.values.shape)
    lookup = _lookup_table(model)
    batch = random_batch(11, seed=2)
    f = model.features(batch)
    rows = {t: lookup(t, ti.keys) for t, ti in f.tables.items()}
    _, want, _ = bce_with_logits(model.forward(f, rows), f.labels)
    pred = Predictor(cfg.model_dump(mode="json"), model.params.as_dict(), lookup)
    np.testing.assert_allclose(pred.predict(batch), want, rtol=1e-5)
    if kind == "two_tower":
        # the served vectors give the model's affinity; the click adds the head (wide weights, bias) to it
        u, v = pred.user_vectors(batch), pred.item_vectors(batch)
        logits = model.forward(f, rows)
        a = model.params.value["score.a"][0]
        np.testing.assert_allclose(model.scale * (u * v).sum(1), model._dot, rtol=1e-4, atol=1e-5)
        assert not np.allclose(logits, a * model._dot + model.params.value["score.b"][0])  # the wide weights count
    else:
        with pytest.raises(InvalidInput, match="two_tower"):
            pred.item_vectors(batch)


def test_instances_to_batch_and_bad_instances() -> None:
    batch = instances_to_batch([{"label": 1, "dense": [1.5, 2], "slots": {"a": [5, 6], "b": 7}}, {"slots": {}}],
                               slots=["a", "b"], n_dense=3)
    assert batch.labels.tolist() == [1.0, 0.0]
    assert batch.dense[0].tolist() == [1.5, 2.0, 0.0]
    assert batch.slot_ids("a", 0).tolist() == [5, 6] and batch.slot_ids("b", 0).tolist() == [7]
    assert batch.slot_ids("a", 1).size == 0
    for bad, msg in [({"slots": {"zz": [1]}}, "unknown slots"), ({"dense": ["x"]}, "dense"),
                     ({"slots": {"a": ["x"]}}, "slot 'a'"), ({"label": 3}, "label"), ("nope", "object"),
                     ({"extra": 1}, "unknown fields")]:
        with pytest.raises(InvalidInput, match=msg):
            instances_to_batch([{"slots": {}}, bad], slots=["a", "b"], n_dense=3)
