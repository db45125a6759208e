"""A dense table: one named float32 array updated on push by its optimizer, per element.

The optimizer is :class:`tables.dense_optimizer.DenseOptimizer` (one numba pass over the
array; Adagrad's accumulator and Adam's moments are per element, Adam's bias correction
uses the table's step count). Its state is saved and loaded with the value, so a shard that
restores a save continues exactly where the save was taken.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np

from core.atomic_files import (
    FORMAT_VERSION,
    decode_arrays,
    encode_arrays,
    read_json,
    read_verified,
    write_bytes,
    write_json,
)
from core.errors import Conflict, CorruptData, InvalidInput, NonFiniteGradient
from tables.dense_optimizer import DenseOptimizer
from tables.table_config import DenseTableConfig


class DenseTable:
    def __init__(self, config: DenseTableConfig, initial: np.ndarray) -> None:
        if not isinstance(initial, np.ndarray) or initial.dtype != np.float32:
            raise InvalidInput(f"dense table {config.name}: initial value must be a float32 array")
        self.config = config
        self.name = config.name
        self.shape = initial.shape
        self._value = np.ascontiguousarray(initial).reshape(-1).copy()
        self._opt = DenseOptimizer(config.optimizer, self._value)
        self._lock = threading.Lock()
        self.version = 0  # number of updates applied

    def pull(self) -> np.ndarray:
        with self._lock:
            return self._value.reshape(self.shape).copy()

    def push(self, grad: Any, *, lr_scale: float = 1.0) -> None:
        """One optimizer step on ``grad``, at ``lr_scale`` times the optimizer's lr (in (0, 1])."""
        if not (isinstance(lr_scale, (int, float)) and not isinstance(lr_scale, bool) and 0.0 < lr_scale <= 1.0):
            raise InvalidInput(f"dense table {self.name}: lr_scale must be a number in (0, 1], got {lr_scale!r}")
        if lr_scale != 1.0 and self.config.optimizer.kind == "ftrl":
            raise InvalidInput(f"dense table {self.name}: runs ftrl, whose steps take no lr_scale (got {lr_scale})")
        if not isinstance(grad, np.ndarray) or grad.dtype != np.float32 or grad.shape != self.shape:
            got = f"{grad.dtype} {grad.shape}" if isinstance(grad, np.ndarray) else type(grad).__name__
            raise InvalidInput(f"dense table {self.name}: gradient must be float32 {self.shape}, got {got}")
        g = np.ascontiguousarray(grad).reshape(-1)
        if not np.isfinite(g).all():  # numpy's SIMD loop: faster than a scalar numba check
            raise NonFiniteGradient(f"dense table {self.name}: gradient holds NaN or Inf; push refused")
        with self._lock:
            self._opt.step(self._value, g, lr_scale=float(lr_scale))
            self.version += 1

    def set(self, value: np.ndarray) -> None:
        """Overwrite the value (optimizer state kept), e.g. for geo-mode merges."""
        if not isinstance(value, np.ndarray) or value.dtype != np.float32 or value.shape != self.shape:
            raise InvalidInput(f"dense table {self.name}: value must be float32 {self.shape}")
        with self._lock:
            self._value[...] = value.reshape(-1)
            self.version += 1

    def save(self, path: str | Path) -> dict[str, Any]:
        return self.write_snapshot(path, self.snapshot())

    def snapshot(self) -> dict[str, Any]:
        """The value, optimizer state and version as of now (copies), for :meth:`write_snapshot`."""
        with self._lock:
            state = {k: v.copy() for k, v in self._opt.state.items()}
            return {"value": self._value.copy(), "state": state, "version": self.version}

    def load_snapshot(self, snap: dict[str, Any]) -> None:
        """Take over a :meth:`snapshot` of this shape (a dense array cut anew over another shard count)."""
        fresh = DenseOptimizer(self.config.optimizer, self._value)
        if np.shape(snap["value"]) != self._value.shape:
            raise CorruptData(f"dense table {self.name}: snapshot of {np.shape(snap['value'])}, table is {self.shape}")
        fresh.load_state(snap["state"])
        with self._lock:
            self._value[...] = snap["value"]
            self._opt = fresh
            self.version = int(snap["version"])

    def write_snapshot(self, path: str | Path, snap: dict[str, Any]) -> dict[str, Any]:
        p = Path(path)
        p.mkdir(parents=True, exist_ok=True)
        arrays = {"value": snap["value"]} | {f"opt.{k}": v for k, v in snap["state"].items()}
        entry = write_bytes(p / f"{self.name.replace('/', '__')}.dense", encode_arrays(arrays))
        manifest = {"format": FORMAT_VERSION, "table": self.name, "shape": list(self.shape),
                    "optimizer": self.config.optimizer.kind, "version": snap["version"], "files": {"dense": entry}}
        write_json(p / f"{self.name.replace('/', '__')}.dense.manifest.json", manifest)
        return manifest

    def load(self, path: str | Path) -> dict[str, Any]:
        p = Path(path)
        mpath = p / f"{self.name.replace('/', '__')}.dense.manifest.json"
        man = read_json(mpath)
        try:
            shape, kind, entry = tuple(int(d) for d in man["shape"]), man["optimizer"], man["files"]["dense"]
            version = int(man.get("version", 0))  # parsed now: a bad field must not half-load the table
        except (KeyError, TypeError, ValueError) as exc:
            raise CorruptData(f"{mpath}: malformed manifest ({exc!r})") from None
        if shape != self.shape or kind != self.config.optimizer.kind:
            raise Conflict(f"{mpath}: saved {shape} with {kind}, table is {self.shape} with "
                           f"{self.config.optimizer.kind}")
        arrays = decode_arrays(read_verified(p, entry), str(p / entry["file"]))
        if "state" in arrays:
            arrays = _from_rows_layout(arrays, self.config, version)
        state = {k[4:]: v for k, v in arrays.items() if k.startswith("opt.")}
        value = arrays.get("value", np.empty(0))
        fresh = DenseOptimizer(self.config.optimizer, self._value)
        try:
            if value.shape != self._value.shape:
                raise CorruptData("value")
            fresh.load_state(state)  # checked before anything changes: a bad file must not half-load
        except CorruptData:
            raise CorruptData(f"{p}: dense arrays missing or of the wrong shape") from None
        with self._lock:
            self._value[...] = value
            self._opt = fresh
            self.version = version
        return man


def _from_rows_layout(arrays: dict[str, np.ndarray], config: DenseTableConfig, version: int) -> dict[str, np.ndarray]:
    """Saves written before the element-wise optimizers held ``value`` (n, 1) and one ``state``
    row per element in the sparse layout (adagrad [acc], adam [m, v, beta1^t, beta2^t], ftrl
    [z, n]). Adam's step count comes back from its saved beta1^t."""
    value, state, opt = arrays["value"], arrays["state"], config.optimizer
    names = {"sgd": (), "adagrad": ("acc",), "adam": ("m", "v"), "ftrl": ("z", "n")}[opt.kind]
    if state.ndim != 2 or state.shape[1] < len(names) + (2 if opt.kind == "adam" else 0):
        raise CorruptData(f"dense table {config.name}: saved state has the wrong shape {state.shape}")
    t = version
    if opt.kind == "adam" and state.shape[0] and opt.beta1 > 0.0 and 0.0 < state[0, 2] < 1.0:
        t = round(float(np.log(state[0, 2]) / np.log(opt.beta1)))
    out = {"value": value.reshape(-1), "opt.t": np.array([t], np.float64)}
    return out | {f"opt.{k}": np.ascontiguousarray(state[:, j]) for j, k in enumerate(names)}
