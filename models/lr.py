"""Logistic regression (wide only): a weight per sparse id plus a linear layer on dense inputs."""

from __future__ import annotations

import numpy as np

from models.base import Model
from models.features import Features
from models.model_config import ModelConfig


class LogisticRegression(Model):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__(config, [("linear.w", (config.n_dense,)), ("linear.b", (1,))])

    def forward(self, f: Features, rows: dict[str, np.ndarray]) -> np.ndarray:
        self._f = f
        p = self.params.value
        z = f.dense @ p["linear.w"] + p["linear.b"][0]
        z = z.astype(np.float32)
        self._add_wide(f, rows, z)
        return z

    def backward(self, dlogits: np.ndarray) -> dict[str, np.ndarray]:
        grads = self._sparse_grads()
        f = self._f
        assert f is not None
        self.params.grad["linear.w"][...] = f.dense.T @ dlogits
        self.params.grad["linear.b"][0] = dlogits.sum()
        self._wide_grads(f, dlogits, grads)
        return grads
