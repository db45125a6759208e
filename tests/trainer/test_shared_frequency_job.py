"""Two workers training two_tower over real shards share one item-frequency estimate in the PS
(``retrieval.shared_frequency``): each shard's clock counts both workers' steps, both models read
the same rates, and a worker keeps no estimate of its own in its pass; without it (or without a
PS) each worker keeps its own at the rate of its share of the stream."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from models import build_model
from models.item_frequency import ItemFrequency, reader_alpha
from models.two_tower import TwoTower
from tables.id_rows_table import RATE_CLOCK_KEY, RATE_WORDS
from tests.models.two_tower_harness import model_config, planted_stream, to_batch
from tests.ps.ps_harness import shard_processes
from trainer.params import LocalStore, PSStore
from trainer.ps_worker import PSWorker
from trainer.shared_frequency import RATES_TABLE, SharedItemFrequency
from trainer.worker import Worker


@pytest.mark.process
def test_two_workers_count_their_steps_into_one_estimate(tmp_path: Path) -> None:
    stream = planted_stream(4_000, n_users=60, n_items=50, seed=5)
    config = model_config({"shared_frequency": True})
    tables = [t.model_dump(mode="json") for t in build_model(config).tables]
    with shard_processes(tmp_path, tables) as shards, shards.client() as ca, shards.client() as cb:
        workers = []
        for c in (ca, cb):
            model = build_model(config)
            workers.append(Worker(model, PSStore(PSWorker(c, num_workers=2), model.params.values)))
        steps = 0
        for a in range(0, 3_000, 128):  # records alternate between the workers, as two partitions do
            s = slice(a, a + 128)
            workers[(a // 128) % 2].step(to_batch(stream.users[s], stream.items[s], stream.labels[s],
                                                  stream.categories))
            steps += 1
        models = [w.model for w in workers]
        assert all(isinstance(m, TwoTower) and isinstance(m.frequency, SharedItemFrequency) for m in models)
        # the PS keeps the frequency estimate, with its tables: a worker's own state is its item counts alone
        assert [{k for k in m.train_state() if not k.startswith("popularity.")} for m in models] == [set(), set()]
        clocks, found = ca.wait(ca.read_id_rows(RATES_TABLE, np.full(1, RATE_CLOCK_KEY, np.uint64), words=RATE_WORDS))
        assert found.all()  # (the read goes to the clock key's shard: each shard counted every step)
        assert int(clocks[0, 0]) == steps
        # both read the same rates of the items they trained (a trained item's rate needs no clock)
        items = np.unique(np.asarray(stream.items[:3_000]))
        hashes = models[0].features(to_batch(np.zeros(items.shape[0], np.int64), items, np.zeros(items.shape[0]),
                                             stream.categories)).item_hash
        ra = models[0].frequency.observe(hashes[:0], hashes)
        rb = models[1].frequency.observe(hashes[:0], hashes)
        np.testing.assert_allclose(ra, rb)
        assert ra.max() > 10 * ra.min()  # popular items counted as such


@pytest.mark.parametrize("shared", [True, False])
def test_without_a_ps_or_the_option_a_worker_keeps_its_own_estimate(shared: bool) -> None:
    stream = planted_stream(600, n_users=30, n_items=20, seed=6)
    config = model_config({"shared_frequency": shared})
    model = build_model(config)
    store = LocalStore(model.tables, model.params.values)
    store.num_workers = 2
    Worker(model, store).step(to_batch(stream.users[:256], stream.items[:256], stream.labels[:256],
                                       stream.categories))
    assert isinstance(model.frequency, ItemFrequency)
    assert model.frequency.alpha == pytest.approx(reader_alpha(config.retrieval.frequency_alpha, 2))
