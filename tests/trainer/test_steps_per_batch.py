"""``train.steps_per_batch`` (trainer.worker.Worker): each mini-batch learnt from n times. A
repeat is the same records once more: the same update as stepping the batch again, but the
batch's metrics, records and its keys' shows and clicks are counted once."""

from __future__ import annotations

import numpy as np
import pytest

from models import build_model
from tests.models.helpers import random_batch, small_config
from trainer.params import LocalStore
from trainer.worker import Worker


def _worker(steps_per_batch: int) -> tuple[Worker, LocalStore]:
    model = build_model(small_config("wide_deep"))
    store = LocalStore(model.tables, model.params.values)
    return Worker(model, store, steps_per_batch=steps_per_batch), store


def test_two_steps_per_batch_update_as_the_batch_stepped_twice_and_count_it_once() -> None:
    batch = random_batch(32, seed=5)
    twice, store2 = _worker(2)
    again, store1 = _worker(1)
    loss = twice.step(batch)
    assert loss == pytest.approx(again.step(batch))  # measured before the first update
    again.step(batch)
    for name, table in store1.sparse.items():
        keys = np.unique(np.concatenate([ids for ids, _ in batch.slots.values()]))
        np.testing.assert_allclose(store2.sparse[name].pull(keys), table.pull(keys), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(twice.model.params.values, again.model.params.values, rtol=1e-5, atol=1e-7)
    assert (twice.steps, twice.records) == (1, 32)

    once, store_once = _worker(1)
    once.step(batch)
    for name, table in store_once.sparse.items():  # shows and clicks of one step, not two
        keys = np.unique(np.concatenate([ids for ids, _ in batch.slots.values()]))
        for got, want in zip(store2.sparse[name].counts(keys), table.counts(keys), strict=True):
            np.testing.assert_array_equal(got, want)
            assert want.any()
    assert twice.metrics.total.count == once.metrics.total.count == 32


def test_steps_per_batch_below_one_is_refused() -> None:
    model = build_model(small_config("wide_deep"))
    with pytest.raises(ValueError, match="steps_per_batch must be >= 1, got 0"):
        Worker(model, LocalStore(model.tables, model.params.values), steps_per_batch=0)


def test_a_two_tower_repeat_counts_its_items_once_in_the_frequency_estimate() -> None:
    """logQ reads how often items occur per step of the stream: a repeat is not another step of it."""
    from models.item_frequency import ItemFrequency

    batches = [random_batch(32, seed=s) for s in (5, 6, 7)]
    for b in batches:
        b.labels[:] = 1.0  # every record a positive: the softmax's rows
    estimates = []
    for steps in (1, 3):
        model = build_model(small_config("two_tower", retrieval={"loss": "softmax"}))
        worker = Worker(model, LocalStore(model.tables, model.params.values), steps_per_batch=steps)
        for b in batches:
            worker.step(b)
        frequency = model.frequency
        assert isinstance(frequency, ItemFrequency)
        assert frequency.step == len(batches)  # one step of the stream per batch, whatever the repeats
        hashes = model.features(batches[0]).item_hash
        estimates.append(frequency.expected_count(hashes))
    np.testing.assert_array_equal(estimates[0], estimates[1])
