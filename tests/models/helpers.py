"""Small hand-made batches and configs shared by the trainer tests."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from logrecords.batch import Batch
from models.model_config import ModelConfig


def small_config(model_type: str, **overrides: object) -> ModelConfig:
    slots = [{"name": "a", "tower": "user"}, {"name": "b", "pooling": "mean", "tower": "user"},
             {"name": "c", "tower": "item"}, {"name": "d", "dim": 3, "tower": "item"}]
    if model_type == "deepfm":
        slots[3] = {"name": "d", "tower": "item"}
    data = {"type": model_type, "slots": slots, "n_dense": 3, "embedding_dim": 4, "mlp": (6, 5), "tower_dim": 4,
            "init_scale": 0.3, "seed": 3, **overrides}
    return ModelConfig.model_validate(data)


def random_batch(n: int, seed: int = 0, *, vocab: int = 7) -> Batch:
    """A batch with multi-valued and empty slots, and ids shared between slots."""
    rng = np.random.default_rng(seed)
    slots = {}
    for k, name in enumerate("abcd"):
        lengths = rng.integers(0, 4, n)
        lengths[0] = 2
        offsets = np.zeros(n + 1, np.int64)
        np.cumsum(lengths, out=offsets[1:])
        # slot "d" shares id space with "c", so keys repeat across slots of a table
        base = 100 * (k if name != "d" else 2)
        slots[name] = ((base + rng.integers(0, vocab, offsets[-1])).astype(np.uint64), offsets)
    return Batch(labels=(rng.random(n) < 0.4).astype(np.float32), dense=rng.integers(0, 9, (n, 3)).astype(np.float32),
                 slots=slots)


def item_batch(items: np.ndarray, times: np.ndarray) -> Batch:
    """One record per item of ``items`` (slots user and item, user 1) at event ``times``."""
    n = items.shape[0]
    one = np.arange(n + 1, dtype=np.int64)
    return Batch(labels=np.zeros(n, np.float32), dense=np.zeros((n, 0), np.float32),
                 slots={"user": (np.ones(n, np.uint64), one), "item": (items, one)}, event_time=times,
                 user_id=np.ones(n, np.uint64), item_id=items)


def central_difference(loss: Callable[[], float], arr: np.ndarray, i: int, eps: float = 1e-3) -> float:
    """d loss / d arr.flat[i] by a central difference (``arr`` is restored)."""
    old = arr.flat[i]
    arr.flat[i] = old + eps
    up = loss()
    arr.flat[i] = old - eps
    down = loss()
    arr.flat[i] = old
    return (up - down) / (2 * eps)
