"""dense_update: local (workers run the dense optimizer) and ps (the store/shards run it on the
pushed gradients) train the same model on one worker; the PS refuses a dense vector whose rule
does not fit the job."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from core.errors import Conflict
from models import build_model
from models.model_config import ModelConfig
from tables.table_config import OptimizerConfig
from tests.ps.ps_harness import shard_processes
from trainer.dense_sync import PSDense, make_dense, ps_lr_scale
from trainer.job_config import DenseUpdate
from trainer.params import SUM, LocalStore, PSStore, dense_rule
from trainer.ps_worker import PSWorker
from trainer.worker import Worker

from .test_learning import criteo_model, planted_batches


def train(update: DenseUpdate, sync_steps: int, batches: list) -> tuple[Worker, LocalStore]:
    model = build_model(criteo_model("wide_deep"))
    store = LocalStore(model.tables, model.params.values,
                       dense_rule=dense_rule(update, model.config.dense_optimizer))
    worker = Worker(model, store, dense_sync_steps=sync_steps, dense_update=update)
    for b in batches:
        worker.step(b)
    worker.dense.flush(store)
    worker.dense.refresh(store)
    return worker, store


def test_one_worker_trains_the_same_dense_model_either_way() -> None:
    batches = list(planted_batches(4000, 250))
    local, _ = train(DenseUpdate.LOCAL, 1, batches)
    ps, store = train(DenseUpdate.PS, 1, batches)
    # the optimizer state is the store's; the worker keeps only its served average (model.dense_average)
    assert set(ps.dense.state()) == {"avg", "avg_t"}
    moved = np.abs(local.model.params.values - build_model(criteo_model("wide_deep")).params.values).max()
    assert moved > 1e-3
    np.testing.assert_allclose(ps.model.params.values, local.model.params.values, rtol=1e-3, atol=1e-5)
    np.testing.assert_array_equal(ps.model.params.values, store.dense)


def test_ps_update_pulls_every_k_steps_and_pushes_every_step() -> None:
    batches = list(planted_batches(2000, 250))
    model = build_model(criteo_model("wide_deep"))
    store = LocalStore(model.tables, model.params.values, dense_rule=model.config.dense_optimizer)
    worker = Worker(model, store, dense_sync_steps=3, dense_update=DenseUpdate.PS)
    seen, stored = [], []
    for b in batches:
        before = model.params.values.copy()
        worker.step(b)
        stored.append(store.dense.copy())
        seen.append(not np.array_equal(before, model.params.values))
    assert seen == [False, False, True, False, False, True, False, False]
    np.testing.assert_array_equal(model.params.values, stored[5])
    assert not np.array_equal(model.params.values, store.dense)  # the last gradients are applied, not pulled yet
    worker.dense.refresh(store)
    np.testing.assert_array_equal(model.params.values, store.dense)


@pytest.mark.process
def test_the_ps_refuses_a_dense_vector_of_another_rule(tmp_path: Path) -> None:
    table = {"name": "emb4", "dim": 4}
    initial = np.zeros(10, np.float32)
    adam = OptimizerConfig(kind="adam", lr=1e-3)
    with shard_processes(tmp_path, [table], n=1) as shards, shards.client() as c:
        PSStore(PSWorker(c), initial, dense_rule=SUM)
        with pytest.raises(Conflict, match="dense_update"):
            PSStore(PSWorker(c), initial, dense_rule=adam)
        PSStore(PSWorker(c), initial, dense_rule=None)  # infer: any rule


def test_ps_lr_scale_is_one_over_the_root_of_the_workers_unless_turned_off() -> None:
    assert ps_lr_scale("inverse_sqrt", 16) == 0.25 and ps_lr_scale("inverse_sqrt", 1) == 1.0
    assert ps_lr_scale("none", 16) == 1.0
    ftrl = make_dense(DenseUpdate.PS, np.zeros(3, np.float32), OptimizerConfig(kind="ftrl", lr=0.1), sync_steps=1,
                      ps_lr_scaling="inverse_sqrt")
    assert isinstance(ftrl, PSDense) and ftrl.lr_scaling == "none"  # ftrl's steps take no scale
    slots = [{"name": "a", "tower": "user"}, {"name": "b", "tower": "item"}]
    for kind in ("lr", "wide_deep", "deepfm", "two_tower"):
        assert ModelConfig(type=kind, slots=slots).dense_ps_lr_scaling == "inverse_sqrt"


@pytest.mark.process
@pytest.mark.parametrize(("scaling", "moved"), [("inverse_sqrt", 0.5), ("none", 1.0)])
def test_an_async_push_among_four_workers_steps_the_shards_dense_lr_over_two(tmp_path: Path, scaling: str,
                                                                              moved: float) -> None:
    """SGD at lr 1 on the shard: a worker's gradient of ones moves every weight by the step's lr."""
    table = {"name": "emb4", "dim": 4}
    initial = np.zeros(10, np.float32)
    with shard_processes(tmp_path, [table], n=1) as shards, shards.client() as c:
        store = PSStore(PSWorker(c, num_workers=4), initial, dense_rule=OptimizerConfig(kind="sgd", lr=1.0))
        dense = PSDense(np.zeros(10, np.float32), lr_scaling=scaling)
        dense.start(store)
        dense.update(np.ones(10, np.float32), store)
        store.drain()
        dense.refresh(store)
        np.testing.assert_allclose(dense.values, -moved)
