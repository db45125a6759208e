"""Dense transforms and the running statistics kept with the model: the estimator against the
slow definition (np.mean / np.std over the prior's values and every value seen), each transform
against a per-element definition, and the statistics' save and restore with the model."""

from __future__ import annotations

import math

import numpy as np
import pytest

from core.errors import CorruptData
from logrecords.batch import Batch
from logrecords.dense_transform import (
    IdentityTransform,
    Log1pTransform,
    StandardizeTransform,
    apply_dense_transforms,
)
from models import build_model
from models.dense_statistics import REFRESH_GROWTH, DenseStatistics
from trainer import checkpoints

from .helpers import random_batch, small_config

TRANSFORMS = (StandardizeTransform(mean=10.0, std=2.0, prior_count=6), Log1pTransform(),
              StandardizeTransform(mean=-3.0, std=0.5, clip=2.0, prior_count=0), IdentityTransform(limit=1.5))


def prior_values(t: StandardizeTransform) -> np.ndarray:
    """``prior_count`` values whose mean and population std are the transform's (prior_count even)."""
    half = t.prior_count // 2
    return np.r_[np.full(half, t.mean - t.std), np.full(half, t.mean + t.std)]


def test_the_running_statistics_are_those_of_the_prior_and_every_value_seen() -> None:
    rng = np.random.default_rng(0)
    stats = DenseStatistics(TRANSFORMS)
    assert stats.columns.tolist() == [0, 2]
    mean, std = stats.mean_std()  # nothing seen: the prior (the field without prior values keeps its std)
    assert mean.tolist() == [10.0, -3.0] and std.tolist() == [2.0, 0.5]
    seen: list[np.ndarray] = []
    for n in (1, 0, 7, 64, 1, 300):
        dense = rng.normal([40.0, 1.0, 5.0, 0.3], [3.0, 1.0, 4.0, 0.1], (n, 4)).astype(np.float32)
        stats.observe(dense)
        seen.append(dense.astype(np.float64))
        values = np.concatenate(seen)
        if values.shape[0] < 2:
            continue
        for i, j in enumerate((0, 2)):
            every = np.r_[prior_values(TRANSFORMS[j]), values[:, j]]
            mean, std = stats.mean_std()
            np.testing.assert_allclose(mean[i], np.mean(every), rtol=1e-12)
            np.testing.assert_allclose(std[i], np.std(every), rtol=1e-10)
            assert stats.state["count"][i] == every.shape[0]
    used = stats.transforms()  # the model's transforms from now on
    assert used[1] == TRANSFORMS[1] and used[3] == TRANSFORMS[3]
    mean, std = stats.mean_std()
    assert isinstance(used[0], StandardizeTransform) and isinstance(used[2], StandardizeTransform)
    assert (used[0].mean, used[0].std, used[0].prior_count) == (mean[0], std[0], 6 + 373)
    assert (used[2].mean, used[2].std, used[2].clip, used[2].prior_count) == (mean[1], std[1], 2.0, 373)
    assert 38 < used[0].mean < 42 and 3 < used[2].mean < 7  # moved from the prior to the data


def test_the_statistics_of_a_log_field_are_those_of_its_values_logs() -> None:
    rng = np.random.default_rng(2)
    stats = DenseStatistics(LOGS)
    seen = [rng.lognormal(3.0, 1.0, (n, 4)).astype(np.float32) for n in (5, 40, 200)]
    seen[0][0, 0] = -7.0  # read as log1p(max(x, 0)) = 0, as the transform reads it
    for dense in seen:
        stats.observe(dense)
    logs = np.log1p(np.maximum(np.concatenate(seen)[:, 0].astype(np.float64), 0.0))
    every = np.r_[prior_values(LOGS[0]), logs]  # the default prior: 10 000 values
    mean, std = stats.mean_std()
    np.testing.assert_allclose([mean[0], std[0]], [np.mean(every), np.std(every)], rtol=1e-9)


def test_non_finite_values_read_as_zero_and_a_constant_field_keeps_a_positive_std() -> None:
    stats = DenseStatistics((StandardizeTransform(mean=0.0, std=1.0, prior_count=0),))
    stats.observe(np.float32([[np.nan], [np.inf], [-np.inf], [3.0]]))
    mean, std = stats.mean_std()
    assert mean[0] == 0.75 and std[0] == pytest.approx(np.std([0, 0, 0, 3.0]))
    const = DenseStatistics((StandardizeTransform(mean=1.7e9, std=1.0, prior_count=0),))
    const.observe(np.full((5, 1), 1.7e9, np.float32))
    t = const.transforms()[0]
    assert t.std > 0 and apply_dense_transforms(np.full((2, 1), 1.7e9, np.float32), (t,)).tolist() == [[0.0], [0.0]]


def reference_transform(x: float, t: object) -> float:
    """The per-element definition of each kind (a non-finite value reads as 0)."""
    x = x if math.isfinite(x) else 0.0
    if isinstance(t, Log1pTransform):
        return math.log1p(max(x, 0.0))
    if isinstance(t, StandardizeTransform):
        v = math.log1p(max(x, 0.0)) if t.log else x
        return min(max((v - t.mean) / t.std, -t.clip), t.clip)
    assert isinstance(t, IdentityTransform)
    return min(max(x, -t.limit), t.limit)


LOGS = (StandardizeTransform(mean=1.0, std=0.5, log=True, clip=3.0), *TRANSFORMS[1:])


@pytest.mark.parametrize("transforms", [TRANSFORMS, LOGS, ()], ids=["each-kind", "standardized-logs", "default-log1p"])
def test_apply_dense_transforms_is_the_per_element_definition(transforms: tuple) -> None:
    rng = np.random.default_rng(1)
    dense = rng.normal(0, 20, (50, 4)).astype(np.float32)
    dense[:5] = np.float32([[np.nan, np.inf, -np.inf, np.nan], [np.inf, -np.inf, np.nan, np.inf],
                            [-np.inf, np.nan, np.inf, -np.inf], [1e30, -1e30, 1e30, -1e30], [0, -0.5, -3, 1.5]])
    before = dense.copy()
    got = apply_dense_transforms(dense, transforms)
    assert got.dtype == np.float32 and np.isfinite(got).all()
    np.testing.assert_array_equal(dense, before)  # the input is left as it was
    kinds = transforms or (Log1pTransform(),) * 4
    want = np.array([[reference_transform(float(dense[i, j]), kinds[j]) for j in range(4)] for i in range(50)])
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    if transforms:  # clipped where the definition clips
        assert got[3, 0] == transforms[0].clip and got[3, 2] == 2.0 and got[3, 3] == -1.5
    with pytest.raises(ValueError, match="3 dense inputs"):
        apply_dense_transforms(dense[:, :3], TRANSFORMS)


def _shifted(batch: Batch, seed: int) -> Batch:
    """``batch`` with dense values far from the prior below (mean ~50)."""
    rng = np.random.default_rng(seed)
    dense = rng.normal(50.0, 4.0, batch.dense.shape).astype(np.float32)
    return Batch(labels=batch.labels, dense=dense, slots=batch.slots)


STD3 = [{"kind": "standardize", "mean": 0.0, "std": 1.0, "prior_count": 20}, {"kind": "log1p"},
        {"kind": "none"}]


@pytest.mark.parametrize("kind", ["wide_deep", "two_tower"])
def test_the_statistics_go_with_the_models_train_state_through_a_pass(tmp_path, kind: str) -> None:
    """Saved in a pass's worker part and restored, the statistics go on exactly as if never saved;
    a part without them starts from the prior; the model's config carries them throughout."""
    cfg = small_config(kind, dense_transforms=STD3)
    a = build_model(cfg)
    batches = [_shifted(random_batch(20, seed=s), s) for s in range(3)]
    for batch in batches:
        a.learn_dense(batch)
    used = a.config.dense_transforms[0]
    seen = np.concatenate([b.dense[:, 0] for b in batches]).astype(np.float64)
    assert isinstance(used, StandardizeTransform) and used.prior_count == 80
    assert used.mean == pytest.approx(seen.sum() / 80, rel=1e-12)  # 20 prior values at 0, 60 near 50
    assert a.config.dense_transforms[1:] == cfg.dense_transforms[1:] and a.config.slots is cfg.slots
    arrays = {f"model.{k}": v for k, v in a.train_state().items()}  # as a commit writes them
    assert {"model.dense_stats.count", "model.dense_stats.mean", "model.dense_stats.m2"} <= set(arrays)
    checkpoints.write_worker_part(str(tmp_path), 1, 0, arrays, {})
    _, back = checkpoints.read_worker_part(str(tmp_path), 1, 0)
    b = build_model(cfg)
    assert b.config.dense_transforms == cfg.dense_transforms
    b.load_train_state({k.removeprefix("model."): v for k, v in back.items()})
    assert b.config.dense_transforms == a.config.dense_transforms
    for s in range(3, 5):
        for m in (a, b):
            m.learn_dense(_shifted(random_batch(20, seed=s), s))
    assert b.config.dense_transforms == a.config.dense_transforms
    c = build_model(cfg)
    c.learn_dense(_shifted(random_batch(20), 0))
    c.load_train_state({})  # a pass saved without statistics: back to the prior
    assert c.config.dense_transforms == cfg.dense_transforms
    with pytest.raises(CorruptData, match="dense statistics"):
        c.load_train_state({"dense_stats.count": np.zeros(2), "dense_stats.mean": np.zeros(2),
                            "dense_stats.m2": np.zeros(2), "dense_stats.columns": np.zeros(1, np.int64)})


def test_a_field_standardized_only_since_the_save_starts_from_its_prior() -> None:
    """The schema changed between a save and the restart: the fields standardized then and now go on
    from the saved statistics, one standardized only now from its prior, one no longer is dropped."""
    before = small_config("wide_deep", dense_transforms=STD3)
    a = build_model(before)
    for s in range(3):
        a.learn_dense(_shifted(random_batch(20, seed=s), s))
    saved = a.train_state()
    now = [STD3[0], {"kind": "standardize", "mean": 7.0, "std": 3.0, "prior_count": 5}, {"kind": "log1p"}]
    b = build_model(small_config("wide_deep", dense_transforms=now))
    b.load_train_state(saved)
    assert b.config.dense_transforms[0] == a.config.dense_transforms[0]
    assert b.config.dense_transforms[1] == StandardizeTransform(mean=7.0, std=3.0, prior_count=5)
    gone = build_model(small_config("wide_deep", dense_transforms=[STD3[1], now[1], STD3[2]]))
    gone.load_train_state(saved)  # field 0 is no longer standardized: its statistics are not used
    assert gone.config.dense_transforms[1] == StandardizeTransform(mean=7.0, std=3.0, prior_count=5)
    logs = build_model(small_config("wide_deep", dense_transforms=[{**STD3[0], "log": True}, *STD3[1:]]))
    logs.load_train_state(saved)  # field 0's statistics were of its values, it now standardizes their logs
    assert logs.config.dense_transforms[0] == StandardizeTransform(mean=0.0, std=1.0, prior_count=20, log=True)


def test_the_config_takes_the_statistics_once_they_grew_and_at_every_save() -> None:
    """A new config every batch would make each batch's feature plans anew: the config takes the
    estimate once the count grew by REFRESH_GROWTH since it last did, and whenever a pass saves it."""
    cfg = small_config("wide_deep", dense_transforms=[{"kind": "standardize", "mean": 0.0, "std": 1.0,
                                                        "prior_count": 6400}, {"kind": "log1p"}, {"kind": "none"}])
    m = build_model(cfg)
    assert REFRESH_GROWTH == 1 / 64
    configs = []
    for s in range(25):  # 10 records a batch: a new config after 1/64 more values, ~100
        m.learn_dense(_shifted(random_batch(10, seed=s), s))
        configs.append(m.config)
    changed = [k for k in range(1, 25) if configs[k] is not configs[k - 1]]
    assert configs[0] is not cfg and changed == [11, 22]  # at 6410 values, then 6520 (>= 6410 * 65/64) and 6630
    assert configs[-1].dense_transforms[0].prior_count == 6630
    m.train_state()  # a pass's save: the config holds every value's statistics
    assert m.config.dense_transforms[0].prior_count == 6650
    assert m.config.dense_transforms == m.dense_statistics.transforms()


def test_a_model_without_standardized_fields_keeps_no_statistics() -> None:
    m = build_model(small_config("wide_deep"))
    cfg = m.config
    m.learn_dense(random_batch(10))
    assert m.dense_statistics is None and m.config is cfg and m.train_state() == {}
