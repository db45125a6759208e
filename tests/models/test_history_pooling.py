"""Attention pooling of a user-tower list slot (models.history_pooling) in two_tower."""

from __future__ import annotations

import math

import numpy as np
import pytest

from models import build_model
from models.history_pooling import POSITIONS, position_decay
from models.layers import bce_with_logits
from models.model_config import ModelConfig
from tests.models.helpers import central_difference, random_batch, small_config


def _attention_config(**overrides: object) -> ModelConfig:
    base = small_config("two_tower", **overrides)
    slots = [s.model_dump() for s in base.slots]
    slots[1]["pooling"] = "attention"  # "b": a user-tower list slot, 0-3 ids per record
    return ModelConfig.model_validate({**base.model_dump(), "slots": slots})


def _loss(model, f, rows) -> float:
    """The summed click loss, plus the mean softmax loss (what backward's gradients are of)."""
    z = model.forward(f, rows)
    click = float((np.maximum(z, 0) - z * f.labels + np.log1p(np.exp(-np.abs(z)))).astype(np.float64).sum())
    if model.config.retrieval.loss.value == "pointwise":
        return click
    model.backward(np.zeros_like(z))  # the softmax loss is computed in backward
    return click + model.last_softmax_loss


@pytest.mark.parametrize(("loss", "half_life"), [("pointwise", None), ("both", None), ("both", 1.5)])
def test_attention_backward_matches_numerical_gradients(loss: str, half_life: float | None) -> None:
    model = build_model(_attention_config(retrieval={"loss": loss, "logq": False, "history_half_life": half_life}))
    f = model.features(random_batch(9, seed=1))
    rng = np.random.default_rng(8)
    rows = {t: rng.normal(0, 0.5, (ti.keys.shape[0], model.row_width[t])).astype(np.float32)
            for t, ti in f.tables.items()}
    start = model.params.value["attention.b.position"].copy()
    model.params.values[...] += rng.normal(0, 0.05, model.params.values.shape).astype(np.float32)
    for name in ("attention.b.query", "attention.b.position"):  # far from the mean pooling they start as
        model.params.value[name][...] = rng.normal(0, 0.7, model.params.value[name].shape)
    if half_life is not None:  # at the recency decay the biases start as, plus a little
        model.params.value["attention.b.position"][...] = start + rng.normal(0, 0.1, start.shape)

    z = model.forward(f, rows)
    _, _, dlogits = bce_with_logits(z, f.labels)
    sparse = model.backward(dlogits * f.n)
    dense = {k: v.copy() for k, v in model.params.grad.items()}
    eps = 1e-3

    def numeric(arr: np.ndarray, i: int) -> float:
        return central_difference(lambda: _loss(model, f, rows), arr, i, eps)

    for name in ("attention.b.query", "attention.b.position"):
        value = model.params.value[name]
        used = range(value.size) if value.size < 8 else range(4)  # positions past 3 ids get no gradient
        want = np.array([numeric(value, i) for i in used])
        np.testing.assert_allclose(dense[name].flat[list(used)], want, rtol=3e-2, atol=3e-3, err_msg=name)
        assert np.abs(dense[name]).sum() > 0
    for t, g in sparse.items():
        want = np.array([numeric(rows[t], i) for i in range(g.size)]).reshape(g.shape)
        np.testing.assert_allclose(g, want, rtol=3e-2, atol=3e-3, err_msg=f"table {t}")


def test_attention_starts_as_the_mean() -> None:
    """Query and position biases start at zero: the user vectors are the mean pooling's."""
    attention = build_model(_attention_config())
    mean = build_model(small_config("two_tower"))
    f = attention.features(random_batch(9, seed=2))
    rng = np.random.default_rng(3)
    rows = {t: rng.normal(0, 0.5, (ti.keys.shape[0], attention.row_width[t])).astype(np.float32)
            for t, ti in f.tables.items()}
    got = attention.user_vectors(f, rows)
    np.testing.assert_allclose(got, mean.user_vectors(mean.features(random_batch(9, seed=2)), rows), rtol=1e-5,
                               atol=1e-6)


def test_attention_only_in_the_two_tower_user_tower() -> None:
    base = small_config("two_tower").model_dump()
    base["slots"][2]["pooling"] = "attention"  # "c": an item-tower slot
    with pytest.raises(ValueError, match="user-tower slots only"):
        ModelConfig.model_validate(base)
    wide = small_config("wide_deep").model_dump()
    wide["slots"][1]["pooling"] = "attention"
    with pytest.raises(ValueError, match="user-tower slots only"):
        ModelConfig.model_validate(wide)


def test_position_decay_matches_its_definition() -> None:
    """-ln(2) * p / half_life per position (a slow reference), zeros without a half-life."""
    np.testing.assert_array_equal(position_decay(None), np.zeros(POSITIONS, np.float32))
    for half_life in (0.5, 2.0, 7.0):
        got = position_decay(half_life)
        assert got.dtype == np.float32 and got.shape == (POSITIONS,)
        want = [-math.log(2.0) * p / half_life for p in range(POSITIONS)]
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_history_half_life_weighs_each_position_half_the_one_before() -> None:
    """With ``history_half_life`` h and the query at its zero start, a record's newest id weighs 2^(1/h) times the
    next one: the pooling's weights against a slow reference, per record."""
    half_life = 2.0
    model = build_model(_attention_config(retrieval={"history_half_life": half_life}))
    np.testing.assert_array_equal(model.params.value["attention.b.position"], position_decay(half_life))
    batch = random_batch(9, seed=4)
    f = model.features(batch)
    rng = np.random.default_rng(5)
    rows = {t: rng.normal(0, 0.5, (ti.keys.shape[0], model.row_width[t])).astype(np.float32)
            for t, ti in f.tables.items()}
    model.user_vectors(f, rows)
    (weights,) = model._attention_weights  # per id of the slot's table, the slot's ids at its offsets there
    offsets = model._attention_input(f, "b")[2]
    for i in range(len(batch)):
        n = int(offsets[i + 1] - offsets[i])
        raw = [2.0 ** (-p / half_life) for p in range(n)]
        want = [w / sum(raw) for w in raw]
        np.testing.assert_allclose(weights[offsets[i]:offsets[i + 1]], want, rtol=1e-5, err_msg=f"record {i}")


def test_history_half_life_must_be_positive() -> None:
    with pytest.raises(ValueError, match="history_half_life"):
        _attention_config(retrieval={"history_half_life": 0.0})
