"""Standardized dense fields in training and serving: a worker trains each batch with the running
statistics of every value before it (also on features a prefetch stage built with older ones),
scores with them, and the bundle exported from its model carries exactly them, so the service's
model inputs are the trainer's; `train-files` reports the statistics it trained and scored with."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from exports import bundle
from exports.predictor import Predictor
from logrecords.batch import Batch
from logrecords.dense_transform import StandardizeTransform, apply_dense_transforms
from models import build_model
from models.features import build_features
from models.model_config import ModelConfig
from tests.models.helpers import random_batch, small_config
from trainer.export import Exporter
from trainer.params import LocalStore
from trainer.worker import Worker, prepare

from ..ps.ps_harness import shard_processes

PRIOR = {"kind": "standardize", "mean": 0.0, "std": 1.0, "prior_count": 30}
TRANSFORMS = [PRIOR, {"kind": "log1p"}, {"kind": "standardize", "mean": 5.0, "std": 2.0, "clip": 3.0}]


def batches(n: int, seed: int = 0) -> list[Batch]:
    """Batches whose standardized fields lie far from the prior: field 0 ~ N(50, 4), field 2 ~ N(-5, 1)."""
    rng = np.random.default_rng(seed)
    out = []
    for k in range(n):
        b = random_batch(32, seed=seed * 100 + k)
        dense = b.dense.copy()
        dense[:, 0] = rng.normal(50.0, 4.0, 32)
        dense[:, 2] = rng.normal(-5.0, 1.0, 32)
        out.append(Batch(labels=b.labels, dense=dense, slots=b.slots))
    return out


def trained_worker(kind: str, data: list[Batch]) -> tuple[Worker, list[tuple]]:
    """A worker trained on ``data``, each batch's features built ahead by a model of the schema's
    config (as a prefetch process's is); returns it and the dense transforms each step found in use."""
    cfg = small_config(kind, dense_transforms=TRANSFORMS)
    model = build_model(cfg)
    ahead = build_model(cfg)  # the prefetch stage's own model: never learns the statistics
    worker = Worker(model, LocalStore(model.tables, model.params.values))
    seen, inputs = [], []
    forward = model.forward

    def recording(f, rows):
        inputs.append(f.dense.copy())
        return forward(f, rows)

    model.forward = recording
    for batch in data:
        seen.append(model.config.dense_transforms)
        worker.step(prepare(ahead, batch))
    model.forward = forward
    for batch, used, x in zip(data, seen, inputs, strict=True):  # each step read the transforms then in use
        np.testing.assert_array_equal(x, apply_dense_transforms(batch.dense, used))
    return worker, seen


@pytest.mark.parametrize("kind", ["wide_deep", "two_tower"])
def test_each_step_trains_with_the_statistics_of_the_values_before_it(kind: str) -> None:
    data = batches(12)
    worker, seen = trained_worker(kind, data)
    assert seen[0] == ModelConfig.model_validate(small_config(kind, dense_transforms=TRANSFORMS)).dense_transforms
    now = worker.model.config.dense_transforms
    values = np.concatenate([b.dense for b in data]).astype(np.float64)
    first = now[0]
    assert isinstance(first, StandardizeTransform) and first.prior_count == 30 + values.shape[0]
    assert first.mean == pytest.approx(values[:, 0].sum() / (30 + values.shape[0]), rel=1e-9)
    assert 40 < first.mean < 50 and now[1] == seen[0][1]
    third = now[2]
    # the default prior weighs as schema infer's sample of 10 000 values: 384 near -5 move it a little
    assert isinstance(third, StandardizeTransform) and third.clip == 3.0 and third.prior_count == 10_000 + 384
    assert third.mean == pytest.approx((10_000 * 5.0 + values[:, 2].sum()) / 10_384, rel=1e-9)
    # scoring (infer mode, the file job's test pass) reads the transforms in use, whoever built the features
    test = batches(1, seed=9)[0]
    ahead = prepare(build_model(small_config(kind, dense_transforms=TRANSFORMS)), test)
    np.testing.assert_array_equal(worker.score(ahead), worker.score(test))
    assert worker.model.config.dense_transforms == now  # scoring learns nothing


@pytest.mark.process
@pytest.mark.parametrize("kind", ["wide_deep", "two_tower"])
def test_the_bundle_carries_the_statistics_and_the_service_reads_the_trainers_inputs(tmp_path: Path,
                                                                                    kind: str) -> None:
    data = batches(8)
    worker, _ = trained_worker(kind, data)
    model = worker.model
    config = model.config
    tables = [t.model_dump(mode="json") for t in config.table_configs()]
    with shard_processes(tmp_path, tables) as shards:
        exporter = Exporter(str(tmp_path / "exports"), shards.client(), small_config(kind, dense_transforms=TRANSFORMS),
                            base_every=10)
        try:
            done = exporter.export(1, worker.dense.served_params(model.params), None, config=config)
        finally:
            exporter.close()
    worker.dense.serve_average()  # model.dense_average: the trainer scores with the weights the bundle carries
    root = tmp_path / "exports"
    man = bundle.read_manifest(root, done["version"])
    assert ModelConfig.model_validate(man.model).dense_transforms == config.dense_transforms
    store = worker.store
    pred = Predictor(man.model, bundle.load_dense(root, man), store.pull_sparse)
    for batch in (data[-1], batches(1, seed=7)[0]):
        trained = build_features(config, batch).dense  # what a training step of this model reads
        np.testing.assert_array_equal(pred.model.features(batch).dense, trained)
        np.testing.assert_array_equal(pred.predict(batch), worker.score(batch))


def _records(n: int, seed: int) -> list[dict]:
    """Click logs with a signed dense field ``delta`` ~ N(20, 3) that moves the click rate."""
    rng = np.random.default_rng(seed)
    delta = rng.normal(20.0, 3.0, n)
    users, items = rng.integers(0, 50, n), rng.integers(0, 40, n)
    p = 1 / (1 + np.exp(-(delta - 20.0) / 3.0 - 0.05 * (items % 7 - 3)))
    clicks = (rng.random(n) < p).astype(int)
    return [{"user": int(u), "item": int(i), "delta": round(float(d), 3), "click": int(c)}
            for u, i, d, c in zip(users, items, delta, clicks, strict=True)]


@pytest.mark.process
@pytest.mark.parametrize("kind", ["wide_deep", "two_tower"])
def test_train_files_moves_the_statistics_from_the_schemas_prior_to_the_data(tmp_path: Path, kind: str) -> None:
    from cli.main import main

    train, test = tmp_path / "train.jsonl", tmp_path / "test.jsonl"
    for path, n, seed in ((train, 3000, 1), (test, 500, 2)):
        path.write_text("".join(json.dumps(r) + "\n" for r in _records(n, seed)))
    schema = {"format": "json", "label": "click", "user_id": "user", "item_id": "item",
              "slots": [{"name": "delta", "kind": "dense",
                         "transform": {"kind": "standardize", "mean": -10.0, "std": 1.0, "prior_count": 500}},
                        {"name": "user", "kind": "sparse", "hash": "int"},
                        {"name": "item", "kind": "sparse", "hash": "int"}]}
    model = {"type": kind, "slots": [{"name": "user", "tower": "user"}, {"name": "item", "tower": "item"}],
             "embedding_dim": 4, "mlp": [8], "tower_dim": 4}
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({"schema": schema, "train": {"model": model}}))
    work = tmp_path / "job"
    assert main(["train-files", "--config", str(config), "--train", str(train), "--test", str(test),
                 "--batch-size", "200", "--workers", "2", "--work-dir", str(work), "--json"]) == 0
    result = json.loads((work / "results" / "result.json").read_text())
    assert result["train_rows"] == 3000 and 0.5 < result["test_auc"] <= 1.0
    chief = result["dense_transforms"][0]
    assert chief == result["workers"][0]["dense_transforms"][0]  # the chief's statistics scored the test set
    for worker in result["workers"]:  # each worker's own: the prior's 500 values and its share of the records
        t, n = worker["dense_transforms"][0], worker["records"]
        assert t["kind"] == "standardize" and t["prior_count"] == 500 + n and n in (1400, 1600)
        # moved from the prior's -10 toward the data's 20, as far as 500 prior values beside n let it
        assert t["mean"] == pytest.approx((500 * -10.0 + n * 20.0) / (500 + n), abs=0.5)
        assert t["std"] > 5.0  # the prior's values at -10 widen the spread beside the data's 3


@pytest.mark.process
def test_the_streaming_jobs_bundles_carry_the_statistics_its_passes_kept(broker, cluster, tmp_path: Path) -> None:
    """`streamrec train`: each pass's worker part keeps the chief's statistics, and the bundle of that
    pass carries the transforms they give (not the schema's prior)."""
    from models.dense_statistics import DenseStatistics
    from trainer import checkpoints
    from trainer.job_config import load_job_config

    from .test_streaming_job import job_yaml, produce, wait_exit

    path = job_yaml(tmp_path, "run", produce(broker.bootstrap, 3000))
    data = yaml.safe_load(path.read_text())
    data["model"]["dense_transforms"] = [{"kind": "standardize", "mean": -50.0, "std": 1.0, "prior_count": 100},
                                         *[{"kind": "log1p"}] * 12]
    path.write_text(yaml.safe_dump(data))
    cfg = load_job_config(path)
    c = cluster(cfg.model.table_configs())
    job = c.train(path, broker.bootstrap)
    assert wait_exit(job) == 0, c.procs.log_of(job)[-3000:]
    root, exports = Path(cfg.checkpoint_dir), Path(cfg.export_dir)
    last = checkpoints.complete_passes(root)[-1]
    _, arrays = checkpoints.read_worker_part(root, last, 0)
    stats = DenseStatistics(cfg.model.dense_transforms)
    stats.load_state({k.removeprefix("model.dense_stats."): v for k, v in arrays.items()
                      if k.startswith("model.dense_stats.")})
    assert stats.state["count"].tolist() == [100 + 3000]
    man = bundle.read_manifest(exports, bundle.list_versions(exports)[-1])
    assert man.pass_id == last
    served = ModelConfig.model_validate(man.model).dense_transforms
    assert served == stats.transforms() and served[1:] == cfg.model.dense_transforms[1:]
    assert isinstance(served[0], StandardizeTransform) and served[0].mean > -45  # moved toward the data's


def test_infer_mode_scores_with_the_statistics_of_the_newest_pass(tmp_path: Path) -> None:
    """`streamrec infer` scores with the PS's parameters, so with the chief's statistics of the newest
    complete pass (not the schema's prior, nor a pass not yet complete); none there: the prior."""
    from trainer import checkpoints
    from trainer.infer import load_dense_statistics

    cfg = small_config("wide_deep", dense_transforms=TRANSFORMS)
    root = str(tmp_path / "checkpoints")
    fresh = build_model(cfg)
    assert load_dense_statistics(fresh, root) is None and fresh.config.dense_transforms == cfg.dense_transforms
    chief = build_model(cfg)
    for pass_id, data in ((1, batches(3)), (2, batches(3, seed=1)), (3, batches(3, seed=2))):
        for batch in data:
            chief.learn_dense(batch)
        for rank in (0, 1):
            state = chief.train_state() if rank == 0 else build_model(cfg).train_state()
            if pass_id == 2 and rank == 0:
                expected = chief.config.dense_transforms  # what a bundle of pass 2 carries
            checkpoints.write_worker_part(root, pass_id, rank, {f"model.{k}": v for k, v in state.items()}, {})
        if pass_id < 3:  # pass 3 is not committed (no manifest)
            checkpoints.commit_pass(root, pass_id, {}, ranks=[0, 1], shard_entries=[])
    model = build_model(cfg)
    assert load_dense_statistics(model, root) == 2
    assert model.config.dense_transforms == expected != cfg.dense_transforms
