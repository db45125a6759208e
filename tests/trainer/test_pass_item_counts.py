"""The bundle's decayed item counts are the whole stream's: the chief sums the counts of every worker's
part of the pass (trainer.pass_commit.job_item_counts), each worker having counted only its own batches."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from models import build_model
from models.model_config import ModelConfig
from models.two_tower import as_two_tower
from stores.store import open_store
from trainer import checkpoints
from trainer.pass_commit import job_item_counts

from ..models.helpers import item_batch

HALF_LIFE = 1800.0
CONFIG = ModelConfig.model_validate({
    "type": "two_tower", "slots": [{"name": "user", "tower": "user"}, {"name": "item", "tower": "item"}],
    "embedding_dim": 4, "mlp": [], "tower_dim": 4, "n_dense": 0, "retrieval": {"popularity_half_life_s": HALF_LIFE}})


def test_the_chief_sums_every_workers_counts(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    n = 1200
    items = (rng.integers(1, 30, n).astype(np.uint64)) | np.uint64(2 << 56)
    times = 1.7e9 + np.sort(rng.uniform(0, 8 * HALF_LIFE, n))
    root = open_store(tmp_path / "checkpoints")
    for rank in (0, 1):  # each worker counts every other batch of 100 records, as two partitions' readers would
        model = as_two_tower(build_model(CONFIG))
        for a in range(rank * 100, n, 200):
            model.count_items(item_batch(items[a:a + 100], times[a:a + 100]))
        arrays = {f"model.{k}": v for k, v in model.train_state().items()}  # as PassCommitter.commit writes them
        checkpoints.write_worker_part(root, 3, rank, arrays, {"rank": rank, "offsets": {}, "records": n // 2})
    ids, counts, as_of = job_item_counts(root, 3, [0, 1], CONFIG)
    assert as_of == times.max()
    want_ids, inverse = np.unique(items, return_inverse=True)
    want = np.bincount(inverse, weights=np.exp2(-(times.max() - times) / HALF_LIFE))
    np.testing.assert_array_equal(ids, want_ids)
    np.testing.assert_allclose(counts, want, rtol=1e-9)
    assert job_item_counts(root, 3, [0], CONFIG)[1].sum() < want.sum()  # one worker's part holds only its share
    other = CONFIG.model_copy(update={"type": "deepfm"})
    assert job_item_counts(root, 3, [0, 1], other) is None
