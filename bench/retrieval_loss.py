"""Offline comparison of the two-tower training losses on a planted interaction stream: recall@10.

The stream (``planted_stream``): users and items with latent factors, item popularity skew
(Zipf), item categories; each event is a user rating an item drawn with probability
proportional to ``popularity * exp(exposure * score)`` (users rate what they are shown, and
they are shown what is popular and a little what they like), and the rating is liked (label
1) with probability ``sigmoid(like * score + bias)``. The last 10% of events by time are
held out. Recall@10 of a holdout user: the share of their holdout liked items in the top 10
of a ranking of every item, items the user rated in training excluded; averaged over
holdout users with a liked item. The oracle ranks by the true probability that the user's
next event is a liked rating of the item (the ceiling); popularity by liked train ratings.
Predict AUC: the click probability (``/v1/predict``'s) on the holdout events against their
labels; the oracle's row uses the true like probability, popularity's each item's smoothed
train like rate (the bar #11 sets for /v1/predict).

Each variant trains the two_tower model in-process (``trainer.worker.Worker`` over a
``LocalStore``: the very step the streaming trainer runs), one pass in time order, batch
256, same seed. Variants: pointwise (the click loss, raw dot product: what two_tower did
before #11), softmax over in-batch negatives with and without the logQ correction, on the
dot product (temperature 0.05 unless named) or on L2-normalised towers (cosine), with 64
sampled negatives, both losses, and the config's default.

Run: ``python bench/retrieval_loss.py [--events 200000] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from logrecords.batch import Batch
from logrecords.generator import roc_auc
from models import build_model
from models.features import build_features
from models.model_config import ModelConfig
from models.two_tower import TwoTower
from trainer.params import LocalStore
from trainer.worker import Worker

USER_BASE, ITEM_BASE, CATEGORY_BASE = 1, 1 << 40, 2 << 40

VARIANTS: dict[str, dict] = {
    "pointwise (before #11)": {"loss": "pointwise", "normalize": False},
    "softmax, dot": {"loss": "softmax", "logq": False, "normalize": False},
    "softmax + logQ, dot": {"loss": "softmax", "logq": True, "normalize": False},
    "softmax + logQ, dot, T 0.1": {"loss": "softmax", "logq": True, "normalize": False, "temperature": 0.1},
    "softmax + logQ, dot, 64 sampled": {"loss": "softmax", "logq": True, "normalize": False, "negatives": 64},
    "softmax + logQ, cosine, T 0.05": {"loss": "softmax", "logq": True, "normalize": True, "temperature": 0.05},
    "softmax + logQ, cosine, T 0.2": {"loss": "softmax", "logq": True, "normalize": True, "temperature": 0.2},
    "both + logQ, dot": {"loss": "both", "logq": True, "normalize": False},
    "both (click x 0.3) + logQ, dot": {"loss": "both", "logq": True, "normalize": False, "pointwise_weight": 0.3},
    "default": {},
}


@dataclass
class Stream:
    users: np.ndarray  # int64[n] in time order
    items: np.ndarray
    labels: np.ndarray  # float32[n]
    categories: np.ndarray  # int64[n_items]
    truth: np.ndarray  # float64[n_users, n_items]: P(next event is a liked rating of the item)
    like: np.ndarray  # float64[n_users, n_items]: P(liked | rated)
    split: int  # events before it train, the rest are held out


def planted_stream(n_events: int, n_users: int = 2000, n_items: int = 1000, dim: int = 8, seed: int = 0) -> Stream:
    rng = np.random.default_rng(seed)
    x = rng.normal(0, 1, (n_users, dim))
    y = rng.normal(0, 1, (n_items, dim))
    score = x @ y.T / np.sqrt(dim)
    pop = 1.0 / (np.arange(n_items) + 10.0)
    exposure = pop[None, :] * np.exp(1.5 * score)
    exposure /= exposure.sum(axis=1, keepdims=True)
    like = 1.0 / (1.0 + np.exp(-(2.5 * score - 0.5)))
    user_weight = rng.pareto(2.0, n_users) + 1.0  # some users rate much more
    user_weight /= user_weight.sum()
    users = rng.choice(n_users, n_events, p=user_weight)
    cum = np.cumsum(exposure, axis=1)
    items = np.minimum((cum[users] < rng.random(n_events)[:, None]).sum(axis=1), n_items - 1)
    labels = (rng.random(n_events) < like[users, items]).astype(np.float32)
    categories = np.argmax(y[:, :4], axis=1)
    return Stream(users, items, labels, categories, exposure * like, like, int(n_events * 0.9))


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


def holdout_auc(model: TwoTower, store: LocalStore, stream: Stream) -> float:
    """AUC of the click probability (what /v1/predict serves) on the held-out events."""
    te = slice(stream.split, None)
    batch = to_batch(stream.users[te], stream.items[te], stream.labels[te], stream.categories)
    f = model.features(batch)
    z = model.forward(f, {t: store.pull_sparse(t, ti.keys) for t, ti in f.tables.items()})
    return roc_auc(stream.labels[te], z)


def recall_at_k(stream: Stream, scores_for, k: int = 10) -> float:
    """Mean over holdout users with a liked item of |top k ∩ liked holdout items| / |liked holdout items|."""
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=200_000)
    ap.add_argument("--users", type=int, default=2000)
    ap.add_argument("--items", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--variants", help="names separated by semicolons (default: all)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    stream = planted_stream(args.events, args.users, args.items, seed=args.seed)
    train_liked = stream.labels[: stream.split] > 0.5
    popularity = np.bincount(stream.items[: stream.split][train_liked], minlength=args.items).astype(np.float64)
    rows = [{"name": "oracle (true scores)", "recall@10": recall_at_k(stream, lambda us: stream.truth[us])},
            {"name": "popularity", "recall@10": recall_at_k(stream, lambda us: np.tile(popularity, (len(us), 1)))}]
    # /v1/predict's bar (#11): each item's smoothed train like rate as the click score
    rated = np.bincount(stream.items[: stream.split], minlength=args.items).astype(np.float64)
    prior = popularity.sum() / max(rated.sum(), 1.0)
    item_rate = (popularity + 10.0 * prior) / (rated + 10.0)
    rows[1]["predict_auc"] = round(roc_auc(stream.labels[stream.split:], item_rate[stream.items[stream.split:]]), 4)
    rows[1]["name"] = "popularity (AUC: item like rate)"
    names = args.variants.split(";") if args.variants else list(VARIANTS)
    for name in names:
        model, store, secs = train(stream, model_config(VARIANTS[name], seed=args.seed))
        rows.append({"name": name, "retrieval": model.config.retrieval.model_dump(mode="json"),
                     "recall@10": recall_at_k(stream, lambda us, m=model, s=store: model_scores(m, s, stream, us)),
                     "predict_auc": round(holdout_auc(model, store, stream), 4), "train_s": round(secs, 1),
                     "records_per_s": round(stream.split / secs)})
    base = next((r["recall@10"] for r in rows if r["name"].startswith("pointwise")), None)
    oracle, pop = rows[0]["recall@10"], rows[1]["recall@10"]
    rows[0]["predict_auc"] = round(roc_auc(stream.labels[stream.split:],
                                           stream.like[stream.users, stream.items][stream.split:]), 4)
    for r in rows:
        r["vs_pointwise"] = round(r["recall@10"] / base, 2) if base else None
        r["vs_popularity"] = round(r["recall@10"] / pop, 2) if pop else None
        r["of_oracle"] = round(r["recall@10"] / oracle, 2) if oracle else None
        r["recall@10"] = round(r["recall@10"], 4)
    load = os.getloadavg()[0]
    if args.json:
        print(json.dumps({"events": args.events, "users": args.users, "items": args.items, "seed": args.seed,
                          "load": round(load, 1), "rows": rows}, indent=1))
        return 0
    print(f"planted stream: {args.events} events, {args.users} users, {args.items} items, seed {args.seed}, "
          f"holdout last 10%; load {load:.1f}")
    print(f"{'model':<32} {'recall@10':>9} {'x pointwise':>11} {'x popularity':>12} {'of oracle':>9} "
          f"{'predict AUC':>11} {'train s':>7}")
    for r in rows:
        print(f"{r['name']:<32} {r['recall@10']:>9.4f} {r['vs_pointwise'] or 0:>11.2f} "
              f"{r['vs_popularity'] or 0:>12.2f} "
              f"{r['of_oracle'] or 0:>9.2f} {r.get('predict_auc', ''):>11} {r.get('train_s', ''):>7}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
