"""Dense optimizers (Adam, Adagrad, SGD) over a model's flat dense vector, run by each worker.

Element-wise numba loops: one pass over the vector per step (~1 ms for 420k weights).
Workers apply their own updates and hand the change to the parameter server every few
steps (see :class:`trainer.dense_sync.DenseSync`), so a shard adds deltas instead of running
an optimizer per push of every worker.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from tables.config import OptimizerConfig

_JIT = {"cache": True, "nogil": True, "error_model": "numpy"}


@njit(**_JIT)
def _adam(w, g, m, v, lr_t, b1, b2, eps, l2, clip):
    for i in range(w.shape[0]):
        gi = g[i]
        if clip > 0:
            gi = min(max(gi, -clip), clip)
        gi += l2 * w[i]
        m[i] = b1 * m[i] + (1 - b1) * gi
        v[i] = b2 * v[i] + (1 - b2) * gi * gi
        w[i] -= lr_t * m[i] / (np.sqrt(v[i]) + eps)


@njit(**_JIT)
def _adagrad(w, g, acc, lr, eps, l2, clip):
    for i in range(w.shape[0]):
        gi = g[i]
        if clip > 0:
            gi = min(max(gi, -clip), clip)
        gi += l2 * w[i]
        acc[i] += gi * gi
        w[i] -= lr * gi / (np.sqrt(acc[i]) + eps)


@njit(**_JIT)
def _sgd(w, g, lr, l2, clip):
    for i in range(w.shape[0]):
        gi = g[i]
        if clip > 0:
            gi = min(max(gi, -clip), clip)
        w[i] -= lr * (gi + l2 * w[i])


class DenseOptimizer:
    """Updates a flat float32 vector in place; ``state`` holds everything a checkpoint needs."""

    def __init__(self, config: OptimizerConfig, size: int) -> None:
        if config.kind not in ("adam", "adagrad", "sgd"):
            raise ValueError(f"dense optimizer must be adam, adagrad or sgd, got {config.kind!r}")
        self.config = config
        c = config
        self.state: dict[str, np.ndarray] = {"t": np.zeros(1, np.float64)}
        if c.kind == "adam":
            self.state |= {"m": np.zeros(size, np.float32), "v": np.zeros(size, np.float32)}
        elif c.kind == "adagrad":
            self.state["acc"] = np.full(size, c.initial_accumulator, np.float32)
        self._f = {k: np.float32(getattr(c, k)) for k in ("lr", "eps", "l2", "beta1", "beta2")}
        self._clip = np.float32(c.grad_clip or 0.0)

    def step(self, w: np.ndarray, g: np.ndarray) -> None:
        f, s = self._f, self.state
        s["t"][0] += 1
        if self.config.kind == "adam":
            t = s["t"][0]
            # bias correction folded into the step size (Kingma & Ba, section 2)
            lr_t = np.float32(f["lr"] * np.sqrt(1 - f["beta2"] ** t) / (1 - f["beta1"] ** t))
            _adam(w, g, s["m"], s["v"], lr_t, f["beta1"], f["beta2"], f["eps"], f["l2"], self._clip)
        elif self.config.kind == "adagrad":
            _adagrad(w, g, s["acc"], f["lr"], f["eps"], f["l2"], self._clip)
        else:
            _sgd(w, g, f["lr"], f["l2"], self._clip)

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        for k, v in self.state.items():
            if k not in state or state[k].shape != v.shape:
                from tables.errors import CorruptData

                raise CorruptData(f"dense optimizer state {k!r} missing or of the wrong shape")
            v[...] = state[k]
