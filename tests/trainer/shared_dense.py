"""A stand-in for the PS dense vector in the dense-rule tests: a plain vector that workers add
their changes to (``local``) or push gradients into (``ps``, SGD with lr 1 at the shard)."""

from __future__ import annotations

import numpy as np


class SharedDense:
    def __init__(self, initial: np.ndarray, workers: int = 1) -> None:
        self.dense = initial.copy()
        self.num_workers = workers

    def pull_dense(self) -> np.ndarray:
        return self.dense.copy()

    def add_dense(self, delta: np.ndarray) -> None:
        self.dense += delta

    def push_dense(self, grad: np.ndarray, *, lr_scale: float = 1.0) -> None:
        self.dense -= np.float32(lr_scale) * grad
