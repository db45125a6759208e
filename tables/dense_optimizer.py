"""Dense optimizers (SGD, Adagrad, Adam, FTRL) over one flat float32 vector, element-wise.

One numba loop per step over the vector, no temporaries: ~0.3-0.6 ms for 420k weights
(``bench/dense.py``), so a shard can run the optimizer on every dense push
(``dense_update: ps``), and a worker on every step (``dense_update: local``).

Every element is updated at every step, so Adam's bias correction is one step count ``t``
for the whole vector (folded into the step size, Kingma & Ba, section 2), and Adagrad's
accumulator is per element. Order per element as in the sparse rules
(:mod:`tables.optimizers`): clip to [-grad_clip, grad_clip], add ``l2 * w`` (all but ftrl),
then the rule.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from core.errors import ConfigError, CorruptData
from tables.hashmap import JIT
from tables.table_config import OptimizerConfig

_F0 = np.float32(0.0)
_F1 = np.float32(1.0)


@njit(inline="always", **JIT)
def _prep(g, w, clip, l2):
    if clip > _F0:
        g = min(max(g, -clip), clip)
    return g + l2 * w


@njit(**JIT)
def _sgd(w, g, lr, l2, clip):
    for i in range(w.shape[0]):
        w[i] -= lr * _prep(g[i], w[i], clip, l2)


@njit(**JIT)
def _adagrad(w, g, acc, lr, l2, clip, eps):
    for i in range(w.shape[0]):
        gi = _prep(g[i], w[i], clip, l2)
        a = acc[i] + gi * gi
        acc[i] = a
        w[i] -= lr * gi / (np.sqrt(a) + eps)


@njit(**JIT)
def _adam(w, g, m, v, lr_t, l2, clip, eps, b1, b2):
    c1, c2 = _F1 - b1, _F1 - b2
    for i in range(w.shape[0]):
        gi = _prep(g[i], w[i], clip, l2)
        mi = b1 * m[i] + c1 * gi
        vi = b2 * v[i] + c2 * gi * gi
        m[i] = mi
        v[i] = vi
        w[i] -= lr_t * mi / (np.sqrt(vi) + eps)


@njit(**JIT)
def _ftrl(w, g, z, n, alpha, l2, clip, beta, l1):
    for i in range(w.shape[0]):
        gi = _prep(g[i], _F0, clip, _F0)
        ni = n[i]
        n_new = ni + gi * gi
        zi = z[i] + gi - (np.sqrt(n_new) - np.sqrt(ni)) / alpha * w[i]
        z[i] = zi
        n[i] = n_new
        if abs(zi) <= l1:
            w[i] = _F0
        else:
            sign = _F1 if zi > _F0 else -_F1
            w[i] = -(zi - sign * l1) / ((beta + np.sqrt(n_new)) / alpha + l2)


class DenseOptimizer:
    """Updates a flat float32 vector in place; ``state`` holds everything a checkpoint needs
    (``t``: steps applied, float64; ``m``/``v`` for adam, ``acc`` for adagrad, ``z``/``n`` for ftrl)."""

    def __init__(self, config: OptimizerConfig, w: np.ndarray) -> None:
        c = self.config = config
        size = w.shape[0]
        self.state: dict[str, np.ndarray] = {"t": np.zeros(1, np.float64)}
        if c.kind == "adam":
            self.state |= {"m": np.zeros(size, np.float32), "v": np.zeros(size, np.float32)}
        elif c.kind == "adagrad":
            self.state["acc"] = np.full(size, c.initial_accumulator, np.float32)
        elif c.kind == "ftrl":
            # z such that the closed form gives back the initial weights (n = 0)
            z = -w * np.float32(c.ftrl_beta / c.lr + c.l2) - np.sign(w) * np.float32(c.l1)
            self.state |= {"z": z.astype(np.float32), "n": np.zeros(size, np.float32)}
        self._f = {k: np.float32(getattr(c, k)) for k in ("lr", "eps", "l2", "beta1", "beta2", "ftrl_beta", "l1")}
        self._clip = np.float32(c.grad_clip or 0.0)

    @property
    def steps(self) -> int:
        return int(self.state["t"][0])

    def step(self, w: np.ndarray, g: np.ndarray, *, lr_scale: float = 1.0) -> None:
        """One update of ``w`` with gradient ``g`` (both contiguous float32 of one length);
        ``lr_scale``: the lr's multiple for this step (a schedule's)."""
        f, s, kind = self._f, self.state, self.config.kind
        s["t"][0] += 1
        lr = f["lr"] if lr_scale == 1.0 else np.float32(self.config.lr * lr_scale)
        if kind == "adam":
            t = s["t"][0]
            c = self.config
            lr_t = np.float32(c.lr * lr_scale * np.sqrt(1.0 - c.beta2**t) / (1.0 - c.beta1**t))
            _adam(w, g, s["m"], s["v"], lr_t, f["l2"], self._clip, f["eps"], f["beta1"], f["beta2"])
        elif kind == "adagrad":
            _adagrad(w, g, s["acc"], lr, f["l2"], self._clip, f["eps"])
        elif kind == "sgd":
            _sgd(w, g, lr, f["l2"], self._clip)
        else:
            if lr_scale != 1.0:  # ftrl's lr is in its closed form: a step of another rate is not a scaled step
                raise ConfigError("a dense lr schedule is for sgd, adagrad and adam, not ftrl")
            _ftrl(w, g, s["z"], s["n"], f["lr"], f["l2"], self._clip, f["ftrl_beta"], f["l1"])

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        """Take over a saved ``state`` (every array of this optimizer, same shapes)."""
        for k, v in self.state.items():
            if k not in state or state[k].shape != v.shape:
                raise CorruptData(f"dense optimizer state {k!r} missing or of the wrong shape")
        for k, v in self.state.items():
            v[...] = state[k]
