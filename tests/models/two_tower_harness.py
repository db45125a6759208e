"""two_tower trained in-process on the project's planted interaction log
(:func:`logrecords.generator.planted_interactions`), one pass in time order, and scored by recall@k
on the last tenth of the log: shared by the model and trainer tests."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from logrecords.batch import Batch
from logrecords.generator import InteractionSpec, planted_interactions
from models import build_model
from models.features import build_features
from models.model_config import ModelConfig
from models.two_tower import TwoTower
from trainer.params import LocalStore
from trainer.worker import Worker

USER_BASE, ITEM_BASE, CATEGORY_BASE = 1, 1 << 40, 2 << 40


@dataclass(frozen=True)
class Stream:
    users: np.ndarray  # int64[n] user rows (0-based) in time order
    items: np.ndarray  # int64[n] item rows (0-based)
    labels: np.ndarray  # float32[n]
    categories: np.ndarray  # int64[n_items]: each item's genre
    truth: np.ndarray  # float64[n_users, n_items]: the true scores at the holdout's middle
    split: int  # events before it train, the rest are held out


def planted_stream(n_events: int, n_users: int, n_items: int, seed: int = 0) -> Stream:
    log = planted_interactions(InteractionSpec(events=n_events, users=n_users, items=n_items, seed=seed))
    split = int(n_events * 0.9)
    categories = np.array([int(log.item_attrs[int(i)]["genre"][1:]) for i in log.item_ids], np.int64)
    truth = log.oracle(np.arange(1, n_users + 1), float(np.median(log.time[split:])))
    return Stream(log.user - 1, log.item - 1, log.label.astype(np.float32), categories, truth, split)


def model_config(retrieval: dict, seed: int = 0) -> ModelConfig:
    slots = [{"name": "user_id", "tower": "user"}, {"name": "item_id", "tower": "item"},
             {"name": "category", "tower": "item"}]
    return ModelConfig.model_validate({"type": "two_tower", "slots": slots, "n_dense": 0, "embedding_dim": 16,
                                       "mlp": [32], "tower_dim": 16, "seed": seed, "retrieval": retrieval})


def _one_id(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return ids.astype(np.uint64), np.arange(ids.shape[0] + 1, dtype=np.int64)


def to_batch(users: np.ndarray, items: np.ndarray, labels: np.ndarray, categories: np.ndarray) -> Batch:
    return Batch(labels=labels.astype(np.float32), dense=np.zeros((users.shape[0], 0), np.float32),
                 slots={"user_id": _one_id(USER_BASE + users), "item_id": _one_id(ITEM_BASE + items),
                        "category": _one_id(CATEGORY_BASE + categories[items])})


def train(stream: Stream, config: ModelConfig, batch_size: int = 256) -> tuple[TwoTower, LocalStore, float]:
    """The model, its store and the seconds the pass took."""
    model = build_model(config)
    assert isinstance(model, TwoTower)
    store = LocalStore(model.tables, model.params.values)
    worker = Worker(model, store)
    t0 = time.perf_counter()
    for a in range(0, stream.split - batch_size + 1, batch_size):
        s = slice(a, a + batch_size)
        worker.step(to_batch(stream.users[s], stream.items[s], stream.labels[s], stream.categories))
    return model, store, time.perf_counter() - t0


def model_scores(model: TwoTower, store: LocalStore, stream: Stream, users: np.ndarray) -> np.ndarray:
    """float[len(users), n_items]: the retrieval score (the served vectors' inner product)."""
    n_items = stream.truth.shape[1]
    all_items = np.arange(n_items)
    batch = to_batch(users, np.zeros_like(users), np.zeros(users.shape[0]), stream.categories)
    fu = build_features(model.config, batch, model.user_slots)
    u = model.user_vectors(fu, {t: store.pull_sparse(t, ti.keys) for t, ti in fu.tables.items()})
    batch = to_batch(np.zeros_like(all_items), all_items, np.zeros(n_items), stream.categories)
    fi = build_features(model.config, batch, model.item_slots)
    v = model.item_vectors(fi, {t: store.pull_sparse(t, ti.keys) for t, ti in fi.tables.items()})
    return u @ v.T


def recall_at_k(stream: Stream, scores_for: Callable[[np.ndarray], np.ndarray], k: int = 10) -> float:
    """Mean over holdout users with a liked item of |top k ∩ liked holdout items| / |liked holdout items|,
    the items each user rated in training left out of both."""
    tr, te = slice(0, stream.split), slice(stream.split, None)
    liked = stream.labels[te] > 0.5
    hold_users, hold_items = stream.users[te][liked], stream.items[te][liked]
    users = np.unique(hold_users)
    scores = np.array(scores_for(users), np.float64)
    seen = np.zeros_like(scores, bool)
    row = {u: i for i, u in enumerate(users.tolist())}
    mask = np.isin(stream.users[tr], users)
    seen[[row[u] for u in stream.users[tr][mask].tolist()], stream.items[tr][mask]] = True
    scores[seen] = -np.inf
    top = np.argsort(-scores, axis=1)[:, :k]
    recalls = []
    for u in users.tolist():
        want = set(hold_items[hold_users == u].tolist()) - set(np.flatnonzero(seen[row[u]]).tolist())
        if want:
            recalls.append(len(want & set(top[row[u]].tolist())) / len(want))
    return float(np.mean(recalls)) if recalls else 0.0
