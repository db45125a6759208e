"""Decayed item counts (models.item_popularity): each item's records weighted 0.5 ** (age / half-life)
by event time, as a slow per-record reference sums them, whatever the arrival order, the folding,
the split of the stream between counters, or a save and restore in between."""

from __future__ import annotations

import numpy as np
import pytest

from models import build_model
from models import item_popularity as ip
from models.item_popularity import DecayedItemCounts, merge_counts, merge_states
from models.model_config import ModelConfig
from models.two_tower import as_two_tower

from .helpers import item_batch

HALF_LIFE = 3600.0
T0 = 1.7e9


def _stream(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``n`` records over 40 items (a few id 0: no item), event times over ~10 half-lives, out of order."""
    rng = np.random.default_rng(seed)
    items = rng.integers(0, 40, n).astype(np.uint64) * np.uint64(7919)
    times = T0 + np.sort(rng.uniform(0, 10 * HALF_LIFE, n)) + rng.normal(0, 600, n)  # late arrivals too
    times[rng.random(n) < 0.02] = np.nan  # no event time: not counted
    return items, times


def _reference(items: np.ndarray, times: np.ndarray) -> tuple[dict[int, float], float]:
    """Per record, in plain Python: every item's sum of 0.5 ** ((T - t) / half-life), T the newest time."""
    counted = [(int(i), float(t)) for i, t in zip(items, times, strict=True) if i != 0 and np.isfinite(t)]
    newest = max(t for _, t in counted)
    out: dict[int, float] = {}
    for i, t in counted:
        out[i] = out.get(i, 0.0) + 0.5 ** ((newest - t) / HALF_LIFE)
    return out, newest


def _as_dict(ids: np.ndarray, counts: np.ndarray) -> dict[int, float]:
    return dict(zip(ids.tolist(), counts.tolist(), strict=True))


@pytest.mark.parametrize("fold_every", [1, 50, 1 << 16])
def test_counts_equal_a_per_record_reference(monkeypatch: pytest.MonkeyPatch, fold_every: int) -> None:
    monkeypatch.setattr(ip, "FOLD_EVERY", fold_every)
    items, times = _stream(3000)
    counter = DecayedItemCounts(HALF_LIFE)
    for a in range(0, items.shape[0], 64):
        counter.observe(items[a:a + 64], times[a:a + 64])
    ids, counts, as_of = counter.counts()
    want, newest = _reference(items, times)
    assert as_of == newest
    assert (np.diff(ids.astype(np.float64)) > 0).all() and 0 not in ids.tolist()
    got = _as_dict(ids, counts)
    assert got.keys() == want.keys()
    np.testing.assert_allclose([got[i] for i in want], list(want.values()), rtol=1e-9)


def test_counters_of_parts_of_the_stream_sum_to_the_whole() -> None:
    """Two trainers reading alternate records, saved and restored midway, merged: the whole stream's counts."""
    items, times = _stream(2000, seed=1)
    whole = DecayedItemCounts(HALF_LIFE)
    whole.observe(items, times)
    parts = [DecayedItemCounts(HALF_LIFE), DecayedItemCounts(HALF_LIFE)]
    for r, part in enumerate(parts):
        part.observe(items[r:1000:2], times[r:1000:2])
        restored = DecayedItemCounts(HALF_LIFE)
        restored.load_state(part.state())
        restored.observe(items[1000 + r::2], times[1000 + r::2])
        parts[r] = restored
    merged_ids, merged, as_of = merge_counts([p.counts() for p in parts], HALF_LIFE)
    ids, counts, newest = whole.counts()
    assert as_of == newest
    np.testing.assert_array_equal(merged_ids, ids)
    np.testing.assert_allclose(merged, counts, rtol=1e-9)


def test_old_counts_are_dropped_and_a_far_future_time_is_capped() -> None:
    counter = DecayedItemCounts(HALF_LIFE)
    counter.observe(np.array([5, 6], np.uint64), np.array([T0, T0 + 30 * HALF_LIFE]))
    ids, counts, _ = counter.counts()
    assert ids.tolist() == [6] and counts.tolist() == [1.0]  # item 5 decayed past the floor
    counter.observe(np.array([7], np.uint64), np.array([1e12]))  # a broken clock: read as about now
    assert counter.counts()[2] < 1e10


def test_bad_input_is_refused() -> None:
    with pytest.raises(ValueError, match="half_life_s"):
        DecayedItemCounts(0.0)
    with pytest.raises(ValueError, match="differ in shape"):
        DecayedItemCounts(HALF_LIFE).observe(np.array([1, 2], np.uint64), np.array([T0]))


def test_two_tower_counts_its_batches_and_keeps_them_in_its_train_state() -> None:
    config = ModelConfig.model_validate({
        "type": "two_tower", "slots": [{"name": "user", "tower": "user"}, {"name": "item", "tower": "item"}],
        "embedding_dim": 4, "mlp": [], "tower_dim": 4, "n_dense": 0,
        "retrieval": {"popularity_half_life_s": HALF_LIFE}})
    items, times = _stream(500, seed=2)
    models = [as_two_tower(build_model(config)) for _ in range(2)]
    for r, model in enumerate(models):  # two workers, alternate batches
        for a in range(r * 50, items.shape[0], 100):
            model.count_items(item_batch(items[a:a + 50], times[a:a + 50]))
    parts = [{f"model.{k}": v for k, v in m.train_state().items()} for m in models]  # as a pass's worker parts
    merged = merge_states(parts, HALF_LIFE, prefix="model.popularity.")
    assert merged is not None
    want, newest = _reference(items, times)
    assert merged[2] == newest
    got = _as_dict(merged[0], merged[1])
    np.testing.assert_allclose([got[i] for i in want], list(want.values()), rtol=1e-9)
    restored = as_two_tower(build_model(config))
    restored.load_train_state(models[0].train_state())
    np.testing.assert_array_equal(restored.popularity.counts()[1], models[0].popularity.counts()[1])
    assert merge_states([{}], HALF_LIFE, prefix="model.popularity.") is None  # parts without counts
