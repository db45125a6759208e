"""Dense optimizers (SGD, Adagrad, Adam, FTRL) over one flat float32 vector, element-wise.

One numba loop per step over the vector, no temporaries: under a millisecond for a few hundred
thousand weights, so a shard can run the optimizer on every dense push
(``dense_update: ps``), and a worker on every step (``dense_update: local``).

Every element is updated at every step, so Adam's bias correction is one step count ``t``
for the whole vector (folded into the step size, Kingma & Ba, section 2), and Adagrad's
accumulator is per element. Order per element as in the sparse rules
(:mod:`tables.optimizers`): clip to [-grad_clip, grad_clip], add ``l2 * w`` (all but ftrl),
then the rule.

A step may also fold the new weights into a moving average (``step(..., average=(acc, keep))``,
:mod:`trainer.dense_average`): for adam in the same pass (the vectors are ~1.7 MB each, so a
second pass reads the weights back from L3 or memory), for the other rules in a pass after it.
"""

from __future__ import annotations

import numpy as np

from core.errors import ConfigError, CorruptData
from core.kernel_cache import JIT, kernel
from tables.table_config import OptimizerConfig

_F0 = np.float32(0.0)
_F1 = np.float32(1.0)
_NO_AVERAGE = np.zeros(0, np.float32)  # _adam's avg when there is none (one compiled signature)


@kernel(inline="always", **JIT)
def _prep(g, w, clip, l2):
    if clip > _F0:
        g = min(max(g, -clip), clip)
    return g + l2 * w


@kernel(**JIT)
def _sgd(w, g, lr, l2, clip):
    for i in range(w.shape[0]):
        w[i] -= lr * _prep(g[i], w[i], clip, l2)


@kernel(**JIT)
def _adagrad(w, g, acc, lr, l2, clip, eps):
    for i in range(w.shape[0]):
        gi = _prep(g[i], w[i], clip, l2)
        a = acc[i] + gi * gi
        acc[i] = a
        w[i] -= lr * gi / (np.sqrt(a) + eps)


@kernel(**JIT)
def moving_average(acc, w, keep):
    """acc = keep * acc + (1 - keep) * w, element-wise."""
    c = _F1 - keep
    for i in range(acc.shape[0]):
        acc[i] = keep * acc[i] + c * w[i]


@kernel(inline="always", **JIT)
def _adam_at(w, m, v, i, gi, lr_t, eps, b1, b2, c1, c2):
    mi = b1 * m[i] + c1 * gi
    vi = b2 * v[i] + c2 * gi * gi
    m[i] = mi
    v[i] = vi
    wi = w[i] - lr_t * mi / (np.sqrt(vi) + eps)
    w[i] = wi
    return wi


@kernel(**JIT)
def _adam(w, g, m, v, lr_t, l2, clip, eps, b1, b2, avg, keep):
    """Adam; with a non-empty ``avg`` also avg = keep * avg + (1 - keep) * (the new w) in the same
    pass. The clip and the average are decided once, outside the loops: a test per element kept
    the loop from vectorizing as well (2x slower on in-cache vectors)."""
    c1, c2, ck = _F1 - b1, _F1 - b2, _F1 - keep
    n = w.shape[0]
    if avg.shape[0] and clip > _F0:
        for i in range(n):
            wi = _adam_at(w, m, v, i, min(max(g[i], -clip), clip) + l2 * w[i], lr_t, eps, b1, b2, c1, c2)
            avg[i] = keep * avg[i] + ck * wi
    elif avg.shape[0]:
        for i in range(n):
            wi = _adam_at(w, m, v, i, g[i] + l2 * w[i], lr_t, eps, b1, b2, c1, c2)
            avg[i] = keep * avg[i] + ck * wi
    elif clip > _F0:
        for i in range(n):
            _adam_at(w, m, v, i, min(max(g[i], -clip), clip) + l2 * w[i], lr_t, eps, b1, b2, c1, c2)
    else:
        for i in range(n):
            _adam_at(w, m, v, i, g[i] + l2 * w[i], lr_t, eps, b1, b2, c1, c2)


@kernel(**JIT)
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

    def step(self, w: np.ndarray, g: np.ndarray, *, lr_scale: float = 1.0,
             average: tuple[np.ndarray, np.float32] | None = None) -> None:
        """One update of ``w`` with gradient ``g`` (both contiguous float32 of one length);
        ``lr_scale``: the lr's multiple for this step (a schedule's); ``average`` = (acc, keep):
        also acc = keep * acc + (1 - keep) * the updated w (see the module docstring)."""
        f, s, kind = self._f, self.state, self.config.kind
        if kind == "ftrl" and lr_scale != 1.0:  # its lr is in its closed form: a step of another rate is no scaled step
            raise ConfigError("a dense lr schedule or scale is for sgd, adagrad and adam, not ftrl")
        s["t"][0] += 1
        lr = f["lr"] if lr_scale == 1.0 else np.float32(self.config.lr * lr_scale)
        if kind == "adam":
            t = s["t"][0]
            c = self.config
            lr_t = np.float32(c.lr * lr_scale * np.sqrt(1.0 - c.beta2**t) / (1.0 - c.beta1**t))
            acc, keep = (_NO_AVERAGE, _F0) if average is None else average
            _adam(w, g, s["m"], s["v"], lr_t, f["l2"], self._clip, f["eps"], f["beta1"], f["beta2"], acc, keep)
            return
        if kind == "adagrad":
            _adagrad(w, g, s["acc"], lr, f["l2"], self._clip, f["eps"])
        elif kind == "sgd":
            _sgd(w, g, lr, f["l2"], self._clip)
        else:
            _ftrl(w, g, s["z"], s["n"], f["lr"], f["l2"], self._clip, f["ftrl_beta"], f["l1"])
        if average is not None:
            moving_average(average[0], w, average[1])

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        """Take over a saved ``state`` (every array of this optimizer, same shapes)."""
        for k, v in self.state.items():
            if k not in state or state[k].shape != v.shape:
                raise CorruptData(f"dense optimizer state {k!r} missing or of the wrong shape")
        for k, v in self.state.items():
            v[...] = state[k]
