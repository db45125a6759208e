"""A dense table: one named float32 array updated by the same optimizers, per element.

The array is viewed as (size, 1) rows so the sparse kernels apply unchanged: Adagrad's
per-row accumulator becomes a per-element one, Adam keeps per-element moments.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np

from tables.checkpoint import (
    FORMAT_VERSION,
    decode_arrays,
    encode_arrays,
    read_json,
    read_verified,
    write_bytes,
    write_json,
)
from tables.config import DenseTableConfig
from tables.errors import Conflict, CorruptData, InvalidInput, NonFiniteGradient
from tables.optimizers import Optimizer


class DenseTable:
    def __init__(self, config: DenseTableConfig, initial: np.ndarray) -> None:
        if not isinstance(initial, np.ndarray) or initial.dtype != np.float32:
            raise InvalidInput(f"dense table {config.name}: initial value must be a float32 array")
        self.config = config
        self.name = config.name
        self.shape = initial.shape
        self._value = np.ascontiguousarray(initial).reshape(-1, 1).copy()
        self._opt = Optimizer(config.optimizer, 1)
        self._state = np.zeros((self._value.shape[0], self._opt.state_width), np.float32)
        self._rows = np.arange(self._value.shape[0], dtype=np.int64)
        self._opt.init_state(self._value, self._state, self._rows, 0)
        self._lock = threading.Lock()
        self.version = 0  # number of updates applied

    def pull(self) -> np.ndarray:
        with self._lock:
            return self._value.reshape(self.shape).copy()

    def push(self, grad: Any) -> None:
        if not isinstance(grad, np.ndarray) or grad.dtype != np.float32 or grad.shape != self.shape:
            got = f"{grad.dtype} {grad.shape}" if isinstance(grad, np.ndarray) else type(grad).__name__
            raise InvalidInput(f"dense table {self.name}: gradient must be float32 {self.shape}, got {got}")
        if not np.isfinite(grad).all():
            raise NonFiniteGradient(f"dense table {self.name}: gradient holds NaN or Inf; push refused")
        g = np.ascontiguousarray(grad).reshape(-1, 1)
        with self._lock:
            self._opt.apply(self._value, self._state, self._rows, g, 0)
            self.version += 1

    def set(self, value: np.ndarray) -> None:
        """Overwrite the value (optimizer state kept), e.g. for geo-mode merges."""
        if not isinstance(value, np.ndarray) or value.dtype != np.float32 or value.shape != self.shape:
            raise InvalidInput(f"dense table {self.name}: value must be float32 {self.shape}")
        with self._lock:
            self._value[:, 0] = value.reshape(-1)
            self.version += 1

    def save(self, path: str | Path) -> dict[str, Any]:
        return self.write_snapshot(path, self.snapshot())

    def snapshot(self) -> dict[str, Any]:
        """The value, optimizer state and version as of now (copies), for :meth:`write_snapshot`."""
        with self._lock:
            return {"value": self._value.copy(), "state": self._state.copy(), "version": self.version}

    def write_snapshot(self, path: str | Path, snap: dict[str, Any]) -> dict[str, Any]:
        p = Path(path)
        p.mkdir(parents=True, exist_ok=True)
        arrays = {"value": snap["value"], "state": snap["state"]}
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
        if arrays.get("value", np.empty(0)).shape != self._value.shape or \
                arrays.get("state", np.empty(0)).shape != self._state.shape:
            raise CorruptData(f"{p}: dense arrays have the wrong shape")
        with self._lock:
            self._value[...] = arrays["value"]
            self._state[...] = arrays["state"]
            self.version = version
        return man
