"""DeepFM (Guo et al. 2017): Wide & Deep plus the factorization-machine pairwise term
0.5 * (|sum_s e_s|^2 - sum_s |e_s|^2) over the slots' pooled embeddings."""

from __future__ import annotations

import numpy as np

from models.model_config import ModelConfig
from models.wide_deep import WideDeep


class DeepFM(WideDeep):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__(config)
        self.n_slots = len(config.slots)
        self.dim = config.dim_of(config.slots[0])
        self._e = np.empty(0, np.float32)
        self._sum = np.empty(0, np.float32)

    def _extra_forward(self, x: np.ndarray, z: np.ndarray) -> None:
        e = x[:, : self.emb.width].reshape(x.shape[0], self.n_slots, self.dim)
        s = e.sum(axis=1)
        self._e, self._sum = e, s
        z += 0.5 * ((s * s).sum(axis=1) - (e * e).sum(axis=(1, 2)))

    def _extra_backward(self, dlogits: np.ndarray, dx: np.ndarray) -> None:
        de = (self._sum[:, None, :] - self._e) * dlogits[:, None, None]
        dx[:, : self.emb.width] += de.reshape(dx.shape[0], -1)
