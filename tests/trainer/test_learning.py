"""On planted data with a fixed seed, the models learn: progressive AUC rises well above 0.5."""

from __future__ import annotations

import numpy as np
import pytest

from logrecords.generator import PlantedModel
from logrecords.parsers import make_parser
from logrecords.sample_encoding import criteo_lines, generated_criteo_schema
from models import build_model
from models.model_config import ModelConfig
from trainer.metrics import WindowedMetrics
from trainer.params import LocalStore
from trainer.prefetch import Prefetcher
from trainer.worker import Worker, prepare


def planted_batches(n: int, batch_size: int, seed: int = 0):
    planted = PlantedModel(seed=seed)
    parser = make_parser(generated_criteo_schema())
    for _ in range(n // batch_size):
        batch, rejected = parser.parse(criteo_lines(planted.sample(batch_size)))
        assert not rejected
        yield batch


def criteo_model(kind: str, **kw) -> ModelConfig:
    slots = [{"name": f"C{i}", "tower": "user" if i != 2 else "item"} for i in range(1, 27)]
    return ModelConfig.model_validate({"type": kind, "slots": slots, "embedding_dim": 4, "mlp": (32, 16),
                                       "tower_dim": 8, "seed": 1, **kw})


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["lr", "wide_deep", "deepfm", "two_tower"])
def test_auc_rises_well_above_half_on_planted_data(kind: str) -> None:
    # a click stream: two_tower learns it with the click loss (its retrieval loss: tests/models/test_two_tower*)
    click_loss = {"retrieval": {"loss": "pointwise", "normalize": False}} if kind == "two_tower" else {}
    model = build_model(criteo_model(kind, **click_loss))
    store = LocalStore(model.tables, model.params.values)
    worker = Worker(model, store, metrics=WindowedMetrics(10_000))
    batches = Prefetcher(planted_batches(40_000, 500), lambda b: prepare(model, b))
    try:
        for p in batches:
            worker.step(p)
    finally:
        batches.close()
    first, last = worker.metrics.windows[0], worker.metrics.windows[-1]
    assert worker.records == 40_000
    assert last["auc"] > 0.62 and last["auc"] > first["auc"] + 0.03, worker.metrics.windows
    assert np.isfinite(last["logloss"]) and 0.5 < last["calibration"] < 2.0
