"""Wide & Deep (Cheng et al. 2016): per-id wide weights plus an MLP over pooled embeddings
and the dense inputs; the logit is their sum.

The embeddings are gathered and pooled straight into the MLP's input buffer, the wide weights
summed in the same pass over the ids (and their gradients scattered in the pooling's backward
pass); the MLP fuses bias and ReLU (:class:`models.layers.MLP`), runs the logit layer's input
gradient as one fused pass, and computes no input gradient for the dense inputs. A training
step allocates no layer outputs and zeroes no dense gradient (the MLP writes each one).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import numpy as np

from models.base import Model
from models.embedding import EmbeddingBlock
from models.features import Features
from models.layers import MLP, bce_with_logits
from models.model_config import ModelConfig


class WideDeep(Model):
    def __init__(self, config: ModelConfig) -> None:
        self.emb = EmbeddingBlock(config, config.slots)
        # the dense inputs need no gradient: only the embeddings' columns get one
        self.mlp = MLP("deep", [self.emb.width + config.n_dense, *config.mlp, 1],
                       input_grad_cols=self.emb.width or None)
        super().__init__(config, self.mlp.specs())
        self.mlp.init(self.params, np.random.default_rng(config.seed))
        self.params.value[f"deep.{len(config.mlp)}.b"][...] = config.output_bias  # the logit's starting bias
        self._x = np.empty((0, self.emb.width + config.n_dense), np.float32)

    def _input(self, f: Features, rows: dict[str, np.ndarray], wide: np.ndarray) -> np.ndarray:
        if self._x.shape[0] != f.n:  # reused across steps of the same batch size
            self._x = np.empty((f.n, self.emb.width + self.config.n_dense), np.float32)
        x = self._x
        self.emb.forward(f, rows, out=x, wide=wide)
        x[:, self.emb.width :] = f.dense
        return x

    def _extra_forward(self, x: np.ndarray, z: np.ndarray) -> None:
        """Hook for DeepFM's interaction term."""

    def _extra_backward(self, dlogits: np.ndarray, dx: np.ndarray) -> None:
        """Hook for DeepFM's interaction term."""

    def forward(self, f: Features, rows: dict[str, np.ndarray]) -> np.ndarray:
        self._f = f
        wide = np.zeros(f.n, np.float32)
        x = self._input(f, rows, wide)  # the block covers every slot: it sums the wide weights too
        z = self.mlp.forward(self.params, x, reuse=self.reuse_buffers)[:, 0] + wide  # a fresh array
        self._extra_forward(x, z)
        return z

    def backward(self, dlogits: np.ndarray) -> dict[str, np.ndarray]:
        grads = self._sparse_grads(zero_dense=False)  # the MLP writes every dense gradient
        f = self._f
        assert f is not None
        dlogits = np.ascontiguousarray(dlogits, np.float32)
        dx = self.mlp.backward(self.params, dlogits[:, None])
        self._extra_backward(dlogits, dx)
        self.emb.backward(f, dx, grads, dwide=dlogits)
        return grads

    def train_in_parts(self, f: Features, rows: dict[str, np.ndarray], parts: int,
                       dense_step: Callable[[np.ndarray], None]) -> tuple[float, np.ndarray, dict[str, np.ndarray]]:
        """One batch whose MLP takes ``parts`` steps, one per equal slice of its records (each slice's
        forward after the previous slice's ``dense_step(params.grads)``), while the embeddings get the
        whole batch's gradient once. Returns the batch's mean loss, its probabilities (each slice's
        before its own step) and the sparse gradients, as ``backward`` would."""
        self._f = f
        n = f.n
        wide = np.zeros(n, np.float32)
        x = self._input(f, rows, wide)
        labels = np.ascontiguousarray(f.labels, np.float32)
        probs, dlogits = np.empty(n, np.float32), np.empty(n, np.float32)
        dx = np.empty((n, self.emb.width), np.float32)
        loss = 0.0
        bounds = np.linspace(0, n, min(parts, n) + 1).astype(np.int64).tolist()
        for a, b in itertools.pairwise(bounds):
            z = self.mlp.forward(self.params, x[a:b], reuse=self.reuse_buffers)[:, 0] + wide[a:b]
            self._extra_forward(x[a:b], z)
            part_loss, probs[a:b], dz = bce_with_logits(z, labels[a:b])
            dx_part = self.mlp.backward(self.params, dz[:, None])
            self._extra_backward(dz, dx_part)
            # the slice's mean loss steps the MLP; the embeddings get their share of the batch's mean
            share = np.float32((b - a) / n)
            dx[a:b] = dx_part * share
            dlogits[a:b] = dz * share
            loss += part_loss * (b - a) / n
            dense_step(self.params.grads)
        grads = self._sparse_grads(zero_dense=False)
        self.emb.backward(f, dx, grads, dwide=dlogits)
        return loss, probs, grads

