"""Bad keys, gradients, counts and configs: a clear error and an unchanged table."""

from __future__ import annotations

import numpy as np
import pytest

from core.errors import ConfigError, InvalidInput, NonFiniteGradient
from core.yaml_config import validate_config
from tables.sparse_table import SparseTable
from tables.table_config import OptimizerConfig, TableConfig

KEYS = [0, 5, 2**63, 2**64 - 1]


@pytest.fixture
def t() -> SparseTable:
    t = SparseTable(TableConfig(name="bad", dim=3, wide=True, optimizer=OptimizerConfig(kind="adam")))
    t.push(KEYS, np.full((4, 4), 0.1, np.float32))
    return t


def snapshot(t: SparseTable) -> tuple:
    s = t.stats()
    return t.pull([*KEYS, 77]), t.size(), s["pushes"], s["admitted"]


def assert_unchanged(t: SparseTable, before: tuple) -> None:
    after = snapshot(t)
    np.testing.assert_array_equal(after[0], before[0])
    assert after[1:] == before[1:]


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ([-1, 3], "non-negative"),
        (np.array([3, -7], np.int64), "-7 at index 1"),
        ([1.5, 2.0], "integers, got float"),
        (np.array([1.0, 2.0]), "got dtype float64"),
        (["1", "2"], "dtype <U1"),
        ([3, "x"], "dtype <U21"),
        (np.array([[1, 2], [3, 4]], np.uint64), "1-d"),
        ([[1, 2]], "1-d"),
        ([1, 2**64], r"\[0, 2\*\*64-1\]"),
        ([2**64 - 1, -1], r"\[0, 2\*\*64-1\]"),
        ([True, False], "dtype bool"),
        (7, "1-d"),
        ([1, None], "integers, got NoneType"),
        ([[1, 2], [3]], "keys"),
    ],
)
def test_bad_keys(t: SparseTable, keys: object, message: str) -> None:
    before = snapshot(t)
    for call in (lambda: t.pull(keys), lambda: t.contains(keys),
                 lambda: t.push(keys, np.zeros((2, 4), np.float32))):
        with pytest.raises(InvalidInput, match=message) as exc:
            call()
        assert "table bad" in str(exc.value), "the error names the table"
    assert_unchanged(t, before)


def test_valid_key_forms_are_accepted(t: SparseTable) -> None:
    want = t.pull(np.array(KEYS, np.uint64))
    for keys in (KEYS, tuple(KEYS), np.repeat(np.array(KEYS, np.uint64), 2)[::2], np.array(KEYS, dtype=object)):
        np.testing.assert_array_equal(t.pull(keys), want)
    np.testing.assert_array_equal(t.pull(np.array([5], np.uint32)), t.pull([5]))
    np.testing.assert_array_equal(t.pull(np.array([5], np.int64)), t.pull([5]))
    assert t.pull([]).shape == (0, 4)
    t.push([], np.zeros((0, 4), np.float32))


@pytest.mark.parametrize(
    ("grads", "message"),
    [
        (np.zeros((4, 4), np.float64), "float32, got float64"),
        (np.zeros((4, 4), np.float16), "float32, got float16"),
        (np.zeros((4, 3), np.float32), r"shape \(4, 4\), got \(4, 3\)"),
        (np.zeros((3, 4), np.float32), r"shape \(4, 4\), got \(3, 4\)"),
        (np.zeros(16, np.float32), r"shape \(4, 4\), got \(16,\)"),
        (np.zeros((4, 4, 1), np.float32), "shape"),
        ([[0.0] * 4] * 4, "numpy float32 array, got list"),
        (np.zeros((4, 4), np.int32), "float32, got int32"),
    ],
)
def test_bad_gradients(t: SparseTable, grads: object, message: str) -> None:
    before = snapshot(t)
    with pytest.raises(InvalidInput, match=message) as exc:
        t.push(KEYS, grads)
    assert "grads" in str(exc.value)
    assert_unchanged(t, before)


@pytest.mark.parametrize(
    ("kw", "message"),
    [({"shows": [1, 2]}, r"shows must be a numeric array of shape \(4,\)"),
     ({"clicks": ["a", "b", "c", "d"]}, "clicks must be a numeric"),
     ({"shows": [1, -1, 1, 1]}, "shows must be non-negative"),
     ({"clicks": np.ones((4, 1))}, "clicks must be a numeric")],
)
def test_bad_counts(t: SparseTable, kw: dict, message: str) -> None:
    before = snapshot(t)
    with pytest.raises(InvalidInput, match=message):
        t.push(KEYS, np.zeros((4, 4), np.float32), **kw)
    assert_unchanged(t, before)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nonfinite_reject_refuses_the_whole_push(t: SparseTable, bad: float) -> None:
    before = snapshot(t)
    g = np.full((5, 4), 0.3, np.float32)
    g[2, 1] = bad
    g[4, 0] = bad
    with pytest.raises(NonFiniteGradient, match="2 of 5 gradient rows hold NaN or Inf") as exc:
        t.push([*KEYS, 9], g)
    assert exc.value.detail == {"bad_rows": 2, "first_index": 2}
    assert_unchanged(t, before)
    assert not t.contains([9])[0]
    assert t.stats()["nonfinite_rejected"] == 2
    with pytest.raises(NonFiniteGradient):
        t.push([1], np.zeros((1, 4), np.float32), shows=[np.nan])
    assert t.stats()["nonfinite_rejected"] == 3


def test_nonfinite_skip_drops_those_rows_and_applies_the_rest() -> None:
    cfg = dict(name="s", dim=2, optimizer=OptimizerConfig(kind="sgd", lr=1.0))
    t = SparseTable(TableConfig(nonfinite="skip", **cfg))
    ref = SparseTable(TableConfig(**cfg))
    keys = [1, 2, 1, 3, 4]
    g = np.array([[1, 1], [np.nan, 0], [2, 2], [0, np.inf], [5, 5]], np.float32)
    t.push(keys, g)
    ok = np.isfinite(g).all(axis=1)
    ref.push(np.array(keys)[ok], g[ok])
    np.testing.assert_array_equal(t.pull([1, 2, 3, 4]), ref.pull([1, 2, 3, 4]))
    assert t.contains([1, 2, 3, 4]).tolist() == [True, False, False, True]
    s = t.stats()
    assert (s["nonfinite_skipped"], s["nonfinite_rejected"]) == (2, 0)


@pytest.mark.parametrize(
    ("data", "message"),
    [({"name": "t", "dim": 0}, "dim"), ({"name": "t", "dim": 513}, "dim"),
     ({"name": "t", "dim": 8, "colour": "red"}, "unknown key 'colour'"),
     ({"name": "t", "dim": 8, "optimizer": {"kind": "adam", "betta1": 0.9}}, "unknown key 'optimizer.betta1'"),
     ({"name": "t", "dim": 8, "optimizer": {"kind": "rmsprop"}}, "optimizer.kind"),
     ({"name": "t", "dim": 8, "admission": {"policy": "count", "min_count": 0}}, "min_count"),
     ({"name": "t", "dim": 8, "admission": {"policy": "sometimes"}}, "admission"),
     ({"name": "t/x", "dim": 8}, "name"), ({"dim": 8}, "name"),
     ({"name": "t", "dim": 8, "show_click_decay": 0}, "show_click_decay"),
     ({"name": "t", "dim": 8, "nonfinite": "ignore"}, "nonfinite")],
)
def test_table_config_is_strict(data: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        validate_config(data, TableConfig, "tables.yaml")
    with pytest.raises(ValueError):  # pydantic's ValidationError when built directly
        TableConfig(**data)


def test_table_config_limits_accepted() -> None:
    for dim in (1, 512):
        t = SparseTable(TableConfig(name="t", dim=dim))
        assert t.pull([1]).shape == (1, dim)
    assert TableConfig(name="t", dim=8, wide=True).width == 9


@pytest.mark.parametrize(("optimizer", "foreign"), [({"kind": "sgd", "beta1": 0.8}, "beta1"),
                                                     ({"kind": "adagrad", "l1": 0.1}, "l1"),
                                                     ({"kind": "ftrl", "accumulator": "element"}, "accumulator")])
def test_an_optimizer_key_of_another_rule_is_refused_by_name(optimizer: dict, foreign: str) -> None:
    from pydantic import ValidationError

    from tables.table_config import OptimizerConfig

    with pytest.raises(ValidationError, match=f"{foreign}: not a key of the {optimizer['kind']} optimizer"):
        OptimizerConfig.model_validate(optimizer)
    # what a dumped config holds (every key, the others at their defaults) is read again as it was
    own = OptimizerConfig.model_validate({"kind": optimizer["kind"]})
    assert OptimizerConfig.model_validate(own.model_dump()) == own
