"""two_tower learns a planted preference: on a small planted interaction stream, the softmax
with logQ ranks the held-out liked items far better than the click loss alone (recall@10)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from models import build_model
from models.item_frequency import reader_alpha
from models.retrieval_loss import item_hashes
from models.two_tower import TwoTower
from tests.models.two_tower_harness import model_config, model_scores, planted_stream, recall_at_k, to_batch, train
from trainer import checkpoints
from trainer.params import LocalStore
from trainer.recovery import model_train_state
from trainer.worker import Worker


def test_softmax_recalls_the_planted_preference_better_than_pointwise() -> None:
    stream = planted_stream(20_000, n_users=300, n_items=200, seed=0)
    recall = {}
    for name, retrieval in {"pointwise": {"loss": "pointwise", "normalize": False},
                            "softmax": {}}.items():  # the default: softmax + logQ
        model, store, _ = train(stream, model_config(retrieval))
        recall[name] = recall_at_k(stream, lambda users, m=model, s=store: model_scores(m, s, stream, users))
    liked = stream.labels[: stream.split] > 0.5
    popular = np.bincount(stream.items[: stream.split][liked], minlength=200).astype(np.float64)
    recall["popularity"] = recall_at_k(stream, lambda users: np.tile(popular, (len(users), 1)))
    recall["oracle"] = recall_at_k(stream, lambda users: stream.truth[users])
    assert model_config({}).retrieval.loss.value == "softmax" and model_config({}).retrieval.logq
    assert recall["softmax"] > 1.5 * recall["pointwise"], recall
    assert recall["softmax"] > recall["popularity"], recall
    assert recall["softmax"] < recall["oracle"], recall


def test_frequency_state_resumes_training_where_it_stopped(tmp_path: Path) -> None:
    stream = planted_stream(3_000, n_users=50, n_items=40, seed=3)
    config = model_config({"loss": "softmax", "frequency_buckets": 1 << 10})
    model, _, _ = train(stream, config)
    state = model.train_state()
    assert {k for k in state if k.startswith("frequency.")} == {"frequency.last", "frequency.gap", "frequency.weight",
                                                                "frequency.step"}
    assert set(state) - {k for k in state if k.startswith("frequency.")} == {"popularity.ids", "popularity.counts",
                                                                             "popularity.as_of"}
    # the way a pass keeps it: in the worker's part, beside the optimizer state, read back on restore
    checkpoints.write_worker_part(tmp_path, 1, 0, {"opt.t": np.zeros(1)} | {f"model.{k}": v for k, v in state.items()},
                                  {"rank": 0, "offsets": {}, "records": 1})
    _, arrays = checkpoints.read_worker_part(tmp_path, 1, 0)
    fresh = build_model(config)
    assert isinstance(fresh, TwoTower) and not any(k.startswith("frequency.") for k in fresh.train_state())
    fresh.load_train_state(model_train_state(arrays))
    probe = item_hashes(to_batch(np.zeros(40, np.int64), np.arange(40), np.zeros(40), stream.categories),
                        ["item_id", "category"])
    np.testing.assert_array_equal(fresh.frequency.expected_count(probe), model.frequency.expected_count(probe))
    assert fresh.frequency.step == model.frequency.step > 0


def test_a_worker_of_two_gives_its_frequency_estimate_the_rate_of_two_gaps() -> None:
    """The worker that trains the model tells it how many share the stream (its store's workers):
    frequency_alpha is per occurrence in the whole stream, so one of two averages as fast as two."""
    stream = planted_stream(2_000, n_users=50, n_items=40, seed=4)
    config = model_config({"loss": "softmax", "frequency_buckets": 1 << 10})
    rate = config.retrieval.frequency_alpha
    for workers, alpha in ((1, rate), (2, reader_alpha(rate, 2))):
        model = build_model(config)
        store = LocalStore(model.tables, model.params.values)
        store.num_workers = workers
        worker = Worker(model, store)
        worker.step(to_batch(stream.users[:256], stream.items[:256], stream.labels[:256], stream.categories))
        assert isinstance(model, TwoTower) and model.readers == workers
        assert model.frequency is not None and model.frequency.alpha == pytest.approx(alpha)
        # a restore (after the worker is made) keeps the reader's rate
        model.load_train_state({f"frequency.{k}": v for k, v in model.frequency.state().items()})
        assert model.frequency.alpha == pytest.approx(alpha)
