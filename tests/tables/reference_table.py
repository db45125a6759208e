"""A slow, readable pure-Python model of SparseTable's pull/push maths (test-only).

Rows live in a dict key -> ``_Row``; every update is a per-key, per-element Python loop
written straight from the formulas in :mod:`tables.optimizers`:

1. sum the gradients of duplicate keys,
2. clip each element to [-grad_clip, grad_clip],
3. add ``l2 * w`` (every rule but ftrl, which uses l2 in its closed form),
4. apply the rule.

Arithmetic is in Python floats (float64); the engine works in float32, so comparisons use
a relative tolerance. Initial values come from :func:`tables.initializers.initial_rows`
(tested on its own in test_initializers.py). Only the "always" admission policy is
modelled: every pushed id gets a row.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from tables.initializers import WIDE_SEED_SALT, initial_rows
from tables.table_config import InitializerConfig, OptimizerConfig, TableConfig


def _initial(key: int, d: int, seed: int, init: InitializerConfig) -> list[float]:
    row = initial_rows(np.array([key], np.uint64), d, seed=seed, kind=init.kind, scale=init.scale)
    return [float(x) for x in row[0]]


class Rule:
    """One optimizer over a window of ``d`` weights; state is a plain dict per row."""

    def __init__(self, cfg: OptimizerConfig) -> None:
        self.cfg = cfg

    def init_state(self, w: list[float]) -> dict:
        c, d = self.cfg, len(w)
        if c.kind == "adagrad" and c.accumulator == "element":
            return {"acc": [c.initial_accumulator] * d}
        if c.kind == "adagrad":
            return {"acc": c.initial_accumulator}
        if c.kind == "adam":
            return {"m": [0.0] * d, "v": [0.0] * d, "beta1_pow": 1.0, "beta2_pow": 1.0}
        if c.kind == "ftrl":
            # With n = 0 the closed form is w = -(z - sign(z) * l1) / (beta / alpha + l2) when |z| > l1.
            # Solve it for z so that the first read of the row is its initializer value.
            denom = c.ftrl_beta / c.lr + c.l2
            z = [(-x * denom - math.copysign(c.l1, x)) if x != 0.0 else 0.0 for x in w]
            return {"z": z, "n": [0.0] * d}
        return {}

    def prepare(self, g: list[float], w: list[float]) -> list[float]:
        """Clip each element, then add the l2 term (not for ftrl)."""
        c = self.cfg
        out = []
        for gj, wj in zip(g, w, strict=True):
            if c.grad_clip is not None:
                gj = min(max(gj, -c.grad_clip), c.grad_clip)
            if c.kind != "ftrl":
                gj += c.l2 * wj
            out.append(gj)
        return out

    def update(self, w: list[float], g_raw: list[float], st: dict) -> None:
        """Update the weights ``w`` in place with the summed gradient ``g_raw``."""
        c = self.cfg
        g = self.prepare(g_raw, w)
        d = len(w)
        if c.kind == "sgd":
            for j in range(d):
                w[j] -= c.lr * g[j]
        elif c.kind == "adagrad" and c.accumulator == "element":
            # One accumulator per element (TensorFlow's sparse Adagrad).
            for j in range(d):
                st["acc"][j] += g[j] * g[j]
                w[j] -= c.lr * g[j] / (math.sqrt(st["acc"][j]) + c.eps)
        elif c.kind == "adagrad":
            # ONE accumulator per row: the mean of the squared gradient elements.
            st["acc"] += sum(x * x for x in g) / d
            step = c.lr / (math.sqrt(st["acc"]) + c.eps)
            for j in range(d):
                w[j] -= step * g[j]
        elif c.kind == "adam":
            # The per-row beta powers are multiplied before use (first update uses beta^1).
            st["beta1_pow"] *= c.beta1
            st["beta2_pow"] *= c.beta2
            lr_t = c.lr * math.sqrt(1.0 - st["beta2_pow"]) / (1.0 - st["beta1_pow"])
            for j in range(d):
                st["m"][j] = c.beta1 * st["m"][j] + (1.0 - c.beta1) * g[j]
                st["v"][j] = c.beta2 * st["v"][j] + (1.0 - c.beta2) * g[j] * g[j]
                w[j] -= lr_t * st["m"][j] / (math.sqrt(st["v"][j]) + c.eps)
        else:  # FTRL-Proximal, McMahan et al. 2013, alpha = lr
            alpha = c.lr
            for j in range(d):
                n_old, n_new = st["n"][j], st["n"][j] + g[j] * g[j]
                sigma = (math.sqrt(n_new) - math.sqrt(n_old)) / alpha
                st["z"][j] += g[j] - sigma * w[j]
                st["n"][j] = n_new
                z = st["z"][j]
                if abs(z) <= c.l1:
                    w[j] = 0.0
                else:
                    w[j] = -(z - math.copysign(c.l1, z)) / ((c.ftrl_beta + math.sqrt(n_new)) / alpha + c.l2)


@dataclass
class _Row:
    wide: list[float]
    emb: list[float]
    wide_state: dict = field(default_factory=dict)
    emb_state: dict = field(default_factory=dict)


class ReferenceTable:
    """dict key -> row, updated with per-key Python loops."""

    def __init__(self, cfg: TableConfig) -> None:
        self.cfg = cfg
        self.rule = Rule(cfg.optimizer)
        self.wide_rule = Rule(cfg.wide_optimizer) if cfg.wide else None
        self.rows: dict[int, _Row] = {}

    def _fresh(self, key: int) -> _Row:
        c = self.cfg
        wide = _initial(key, 1, c.seed ^ WIDE_SEED_SALT, c.wide_initializer) if c.wide else []
        return _Row(wide=wide, emb=_initial(key, c.dim, c.seed, c.initializer))

    def pull(self, keys: np.ndarray) -> np.ndarray:
        out = []
        for k in keys.tolist():
            row = self.rows.get(k) or self._fresh(k)
            out.append(row.wide + row.emb)
        return np.array(out, np.float64).reshape(len(out), self.cfg.width)

    def push(self, keys: np.ndarray, grads: np.ndarray) -> None:
        summed: dict[int, list[float]] = {}
        for k, g in zip(keys.tolist(), grads.tolist(), strict=True):
            if k in summed:
                summed[k] = [a + b for a, b in zip(summed[k], g, strict=True)]
            else:
                summed[k] = list(g)
        for k, g in summed.items():
            row = self.rows.get(k)
            if row is None:
                row = self.rows[k] = self._fresh(k)
                if self.wide_rule is not None:
                    row.wide_state = self.wide_rule.init_state(row.wide)
                row.emb_state = self.rule.init_state(row.emb)
            if self.wide_rule is not None:
                self.wide_rule.update(row.wide, g[:1], row.wide_state)
                g = g[1:]
            self.rule.update(row.emb, g, row.emb_state)
