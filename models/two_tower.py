"""Two-tower retrieval: a user tower (user slots + dense inputs) and an item tower (item
slots), each an MLP over pooled embeddings; the click logit is their dot product plus a bias.
The item tower alone gives the vectors the service indexes; the user tower the queries."""

from __future__ import annotations

import numpy as np

from models.base import Model
from models.embedding import EmbeddingBlock
from models.features import Features
from models.layers import MLP
from models.model_config import ModelConfig, Tower


class TwoTower(Model):
    def __init__(self, config: ModelConfig) -> None:
        self.user_slots = tuple(s for s in config.slots if s.tower is Tower.USER)
        self.item_slots = tuple(s for s in config.slots if s.tower is Tower.ITEM)
        self.user_emb = EmbeddingBlock(config, self.user_slots)
        self.item_emb = EmbeddingBlock(config, self.item_slots)
        self.user_mlp = MLP("user", [self.user_emb.width + config.n_dense, *config.mlp, config.tower_dim])
        self.item_mlp = MLP("item", [self.item_emb.width, *config.mlp, config.tower_dim])
        super().__init__(config, [*self.user_mlp.specs(), *self.item_mlp.specs(), ("score.b", (1,))])
        rng = np.random.default_rng(config.seed)
        self.user_mlp.init(self.params, rng)
        self.item_mlp.init(self.params, rng)
        self._u = self._v = np.empty(0, np.float32)

    def user_vectors(self, f: Features, rows: dict[str, np.ndarray]) -> np.ndarray:
        x = np.empty((f.n, self.user_emb.width + self.config.n_dense), np.float32)
        self.user_emb.forward(f, rows, out=x)
        x[:, self.user_emb.width :] = f.dense
        return self.user_mlp.forward(self.params, x)

    def item_vectors(self, f: Features, rows: dict[str, np.ndarray]) -> np.ndarray:
        return self.item_mlp.forward(self.params, self.item_emb.forward(f, rows))

    def forward(self, f: Features, rows: dict[str, np.ndarray]) -> np.ndarray:
        self._f = f
        self._u, self._v = self.user_vectors(f, rows), self.item_vectors(f, rows)
        return (self._u * self._v).sum(axis=1) + self.params.value["score.b"][0]

    def backward(self, dlogits: np.ndarray) -> dict[str, np.ndarray]:
        grads = self._sparse_grads()
        f = self._f
        assert f is not None
        d = np.ascontiguousarray(dlogits, np.float32)[:, None]
        self.params.grad["score.b"][0] = dlogits.sum()
        dxu = self.user_mlp.backward(self.params, d * self._v)
        dxi = self.item_mlp.backward(self.params, d * self._u)
        self.user_emb.backward(f, dxu, grads)
        self.item_emb.backward(f, np.ascontiguousarray(dxi), grads)
        return grads
