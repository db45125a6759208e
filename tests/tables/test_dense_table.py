"""DenseTable: the optimizers per element against numpy, save/load, refusals."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from core.errors import Conflict, CorruptData, InvalidInput, NonFiniteGradient
from tables.dense_table import DenseTable
from tables.table_config import DenseTableConfig, OptimizerConfig


class NumpyDense:
    """Every element is its own row: Adagrad's accumulator is per element here."""

    def __init__(self, c: OptimizerConfig, w: np.ndarray) -> None:
        self.c = c
        self.w = w.astype(np.float64)
        self.acc = np.full_like(self.w, c.initial_accumulator)
        self.m, self.v = np.zeros_like(self.w), np.zeros_like(self.w)
        self.p1 = self.p2 = 1.0
        self.n = np.zeros_like(self.w)
        denom = c.ftrl_beta / c.lr + c.l2
        self.z = np.where(self.w != 0, -self.w * denom - np.sign(self.w) * c.l1, 0.0)

    def push(self, g: np.ndarray) -> None:
        c = self.c
        g = g.astype(np.float64)
        if c.grad_clip is not None:
            g = np.clip(g, -c.grad_clip, c.grad_clip)
        if c.kind != "ftrl":
            g = g + c.l2 * self.w
        if c.kind == "sgd":
            self.w -= c.lr * g
        elif c.kind == "adagrad":
            self.acc += g * g
            self.w -= c.lr * g / (np.sqrt(self.acc) + c.eps)
        elif c.kind == "adam":
            self.p1 *= c.beta1
            self.p2 *= c.beta2
            self.m = c.beta1 * self.m + (1 - c.beta1) * g
            self.v = c.beta2 * self.v + (1 - c.beta2) * g * g
            self.w -= c.lr * np.sqrt(1 - self.p2) / (1 - self.p1) * self.m / (np.sqrt(self.v) + c.eps)
        else:
            n_new = self.n + g * g
            self.z += g - (np.sqrt(n_new) - np.sqrt(self.n)) / c.lr * self.w
            self.n = n_new
            w = -(self.z - np.sign(self.z) * c.l1) / ((c.ftrl_beta + np.sqrt(self.n)) / c.lr + c.l2)
            self.w = np.where(np.abs(self.z) <= c.l1, 0.0, w)


OPTIMIZERS = [
    OptimizerConfig(kind="sgd", lr=0.1, l2=0.2, grad_clip=0.3),
    OptimizerConfig(kind="adagrad", lr=0.05, l2=0.1, grad_clip=0.3, initial_accumulator=0.01),
    OptimizerConfig(kind="adam", lr=0.01, l2=0.1, grad_clip=0.3),
    OptimizerConfig(kind="ftrl", lr=0.1, l2=0.5, l1=0.01, grad_clip=0.3),
    OptimizerConfig(kind="adam", lr=1e-3),
]


def initial(shape: tuple[int, ...] = (3, 4)) -> np.ndarray:
    return np.random.default_rng(0).normal(size=shape).astype(np.float32) * 0.1


@pytest.mark.parametrize("opt", OPTIMIZERS, ids=lambda o: f"{o.kind}-{o.l2}")
@pytest.mark.parametrize("shape", [(3, 4), (7,)])
def test_matches_numpy_reference(opt: OptimizerConfig, shape: tuple[int, ...]) -> None:
    w0 = initial(shape)
    t, ref = DenseTable(DenseTableConfig(name="d", optimizer=opt), w0), NumpyDense(opt, w0)
    np.testing.assert_allclose(t.pull(), ref.w, rtol=1e-5, atol=1e-6)
    rng = np.random.default_rng(1)
    for i in range(6):
        g = (rng.normal(size=shape) * 0.4).astype(np.float32)
        t.push(g)
        ref.push(g)
        np.testing.assert_allclose(t.pull(), ref.w, rtol=1e-5, atol=1e-6)
        assert t.version == i + 1
    assert t.pull().shape == shape and t.pull().dtype == np.float32


def test_pull_returns_a_copy() -> None:
    t = DenseTable(DenseTableConfig(name="d"), initial())
    v = t.pull()
    v[...] = 9
    assert not np.array_equal(t.pull(), v)


@pytest.mark.parametrize("opt", OPTIMIZERS[:3], ids=lambda o: o.kind)
def test_save_load_and_continue(tmp_path: Path, opt: OptimizerConfig) -> None:
    cfg = DenseTableConfig(name="layer/w", optimizer=opt)
    rng = np.random.default_rng(2)
    a = DenseTable(cfg, initial())
    for _ in range(3):
        a.push((rng.normal(size=(3, 4)) * 0.2).astype(np.float32))
    man = a.save(tmp_path)
    assert man["version"] == 3
    b = DenseTable(cfg, np.zeros((3, 4), np.float32))
    b.load(tmp_path)
    np.testing.assert_array_equal(b.pull(), a.pull())
    assert b.version == 3
    for _ in range(3):  # the optimizer state came along: both continue identically
        g = (rng.normal(size=(3, 4)) * 0.2).astype(np.float32)
        a.push(g)
        b.push(g)
    np.testing.assert_array_equal(b.pull(), a.pull())


@pytest.mark.parametrize(
    ("cfg", "init"),
    [(DenseTableConfig(name="d", optimizer=OptimizerConfig(kind="sgd")), np.zeros((3, 4), np.float32)),
     (DenseTableConfig(name="d"), np.zeros((4, 3), np.float32)),
     (DenseTableConfig(name="d"), np.zeros(12, np.float32))],
)
def test_load_of_another_layout_is_a_conflict(tmp_path: Path, cfg: DenseTableConfig, init: np.ndarray) -> None:
    DenseTable(DenseTableConfig(name="d"), initial()).save(tmp_path)
    b = DenseTable(cfg, init)
    with pytest.raises(Conflict):
        b.load(tmp_path)
    np.testing.assert_array_equal(b.pull(), init)


@pytest.mark.parametrize("damage", ["flip", "truncate", "missing", "manifest", "version", "shape"])
def test_corrupt_save_is_refused(tmp_path: Path, damage: str) -> None:
    DenseTable(DenseTableConfig(name="d"), initial()).save(tmp_path)
    f, m = tmp_path / "d.dense", tmp_path / "d.dense.manifest.json"
    if damage == "flip":
        data = bytearray(f.read_bytes())
        data[-3] ^= 1
        f.write_bytes(bytes(data))
    elif damage == "truncate":
        f.write_bytes(f.read_bytes()[:-4])
    elif damage == "missing":
        f.unlink()
    elif damage == "manifest":
        m.write_text("{not json")
    else:
        man = json.loads(m.read_text())
        man[damage] = "x"
        m.write_text(json.dumps(man))
    b = DenseTable(DenseTableConfig(name="d"), np.ones((3, 4), np.float32))
    with pytest.raises(CorruptData, match=r"d\.dense"):
        b.load(tmp_path)
    np.testing.assert_array_equal(b.pull(), np.ones((3, 4), np.float32))
    assert b.version == 0


@pytest.mark.parametrize(
    ("grad", "error", "message"),
    [(np.zeros((3, 4), np.float64), InvalidInput, "float64"),
     (np.zeros((4, 3), np.float32), InvalidInput, r"\(4, 3\)"),
     (np.zeros(12, np.float32), InvalidInput, r"\(12,\)"),
     ([[0.0] * 4] * 3, InvalidInput, "list"),
     (np.full((3, 4), np.nan, np.float32), NonFiniteGradient, "NaN or Inf"),
     (np.array([[np.inf] + [0.0] * 3] * 3, np.float32), NonFiniteGradient, "NaN or Inf")],
)
def test_bad_gradients_are_refused(grad: object, error: type, message: str) -> None:
    w0 = initial()
    t = DenseTable(DenseTableConfig(name="d"), w0)
    with pytest.raises(error, match=message):
        t.push(grad)
    np.testing.assert_array_equal(t.pull(), w0)
    assert t.version == 0


@pytest.mark.parametrize("opt", OPTIMIZERS[:3], ids=lambda o: o.kind)
def test_a_push_at_an_lr_scale_steps_as_the_optimizer_at_that_multiple_of_its_lr(opt: OptimizerConfig) -> None:
    w0 = initial()
    t = DenseTable(DenseTableConfig(name="d", optimizer=opt), w0)
    ref = NumpyDense(opt.model_copy(update={"lr": opt.lr * 0.25}), w0)
    rng = np.random.default_rng(2)
    for _ in range(4):
        g = (rng.normal(size=w0.shape) * 0.4).astype(np.float32)
        t.push(g, lr_scale=0.25)
        ref.push(g)
        np.testing.assert_allclose(t.pull(), ref.w, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("scale", [0.0, -0.5, 1.5, float("nan"), "0.5", True, None])
def test_an_lr_scale_outside_zero_to_one_is_refused_and_changes_nothing(scale: object) -> None:
    w0 = initial()
    t = DenseTable(DenseTableConfig(name="d"), w0)
    with pytest.raises(InvalidInput, match="lr_scale"):
        t.push(np.ones((3, 4), np.float32), lr_scale=scale)  # type: ignore[arg-type]
    np.testing.assert_array_equal(t.pull(), w0)
    assert t.version == 0


def test_ftrl_takes_no_lr_scale_and_its_state_stays_as_it_was() -> None:
    w0 = initial()
    t = DenseTable(DenseTableConfig(name="d", optimizer=OPTIMIZERS[3]), w0)
    with pytest.raises(InvalidInput, match="ftrl"):
        t.push(np.ones((3, 4), np.float32), lr_scale=0.5)
    np.testing.assert_array_equal(t.pull(), w0)
    assert t.version == 0 and t._opt.steps == 0


def test_bad_initial_and_set_values() -> None:
    with pytest.raises(InvalidInput, match="float32"):
        DenseTable(DenseTableConfig(name="d"), np.zeros((2, 2)))
    t = DenseTable(DenseTableConfig(name="d"), initial())
    with pytest.raises(InvalidInput, match="float32"):
        t.set(np.zeros((3, 4)))
    with pytest.raises(InvalidInput):
        t.set(np.zeros((4, 3), np.float32))
    t.set(np.ones((3, 4), np.float32))
    np.testing.assert_array_equal(t.pull(), np.ones((3, 4), np.float32))
    assert t.version == 1


@pytest.mark.parametrize("opt", OPTIMIZERS, ids=lambda o: f"{o.kind}-{o.l2}")
def test_many_steps_on_a_long_vector_match_numpy(opt: OptimizerConfig) -> None:
    """Adam's bias correction comes from the table's step count: still right after many steps."""
    w0 = initial((10_007,))
    t, ref = DenseTable(DenseTableConfig(name="d", optimizer=opt), w0), NumpyDense(opt, w0)
    rng = np.random.default_rng(3)
    for _ in range(40):
        g = (rng.normal(size=w0.shape) * 0.3).astype(np.float32)
        t.push(g)
        ref.push(g)
    np.testing.assert_allclose(t.pull(), ref.w, rtol=2e-5, atol=2e-6)
    assert t.version == 40


def _rows_layout_save(path: Path, opt: OptimizerConfig, w0: np.ndarray, grads: list[np.ndarray]) -> None:
    """A save as written before the element-wise optimizers: the sparse rules over (n, 1) rows."""
    from core.atomic_files import FORMAT_VERSION, encode_arrays, write_bytes, write_json
    from tables.optimizers import Optimizer

    value = w0.reshape(-1, 1).copy()
    rule = Optimizer(opt, 1)
    state = np.zeros((value.shape[0], rule.state_width), np.float32)
    rows = np.arange(value.shape[0], dtype=np.int64)
    rule.init_state(value, state, rows, 0)
    for g in grads:
        rule.apply(value, state, rows, g.reshape(-1, 1), 0)
    entry = write_bytes(path / "d.dense", encode_arrays({"value": value, "state": state}))
    write_json(path / "d.dense.manifest.json", {"format": FORMAT_VERSION, "table": "d", "shape": list(w0.shape),
                                                 "optimizer": opt.kind, "version": len(grads),
                                                 "files": {"dense": entry}})


@pytest.mark.parametrize("opt", OPTIMIZERS, ids=lambda o: f"{o.kind}-{o.l2}")
def test_saves_of_the_row_layout_load_and_continue(tmp_path: Path, opt: OptimizerConfig) -> None:
    w0 = initial((50,))
    rng = np.random.default_rng(4)
    grads = [(rng.normal(size=w0.shape) * 0.3).astype(np.float32) for _ in range(10)]
    _rows_layout_save(tmp_path, opt, w0, grads[:5])
    t, ref = DenseTable(DenseTableConfig(name="d", optimizer=opt), np.zeros(50, np.float32)), NumpyDense(opt, w0)
    t.load(tmp_path)
    for g in grads[:5]:
        ref.push(g)
    np.testing.assert_allclose(t.pull(), ref.w, rtol=1e-5, atol=1e-6)
    for g in grads[5:]:  # the step count and moments came along: the rule goes on as if never saved
        t.push(g)
        ref.push(g)
    np.testing.assert_allclose(t.pull(), ref.w, rtol=1e-5, atol=1e-6)
    assert t.version == 10
