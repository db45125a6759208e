"""The models, shared by training and serving, and ``build_model``: the one way to get a model from its config.

  model_config.py  ModelConfig: type, slots, dims, MLP, optimizers (what a bundle carries)
  layers.py        ParamSet (one flat dense vector), MLP, BCE, numba pooling and wide kernels
  features.py      Batch -> per-table unique keys (deduplicated across slots) and indices
  base.py          Model: features -> forward -> backward, checked against numerical gradients
  lr.py, wide_deep.py, deepfm.py, two_tower.py (embedding.py: the slots' pooled embeddings)
  retrieval_loss.py, item_frequency.py, negative_pool.py  two_tower's softmax, its logQ estimate, its negatives
"""

from __future__ import annotations

from typing import Any

from core.yaml_config import validate_config
from models.base import Model
from models.model_config import ModelConfig, ModelType


def build_model(model_config: dict[str, Any] | ModelConfig) -> Model:
    """A freshly initialized model (deterministic for the config's seed) from a ModelConfig or its dict."""
    from models.deepfm import DeepFM
    from models.lr import LogisticRegression
    from models.two_tower import TwoTower
    from models.wide_deep import WideDeep

    cfg = model_config if isinstance(model_config, ModelConfig) else validate_config(model_config, ModelConfig,
                                                                                     "model config")
    kinds = {ModelType.LR: LogisticRegression, ModelType.WIDE_DEEP: WideDeep, ModelType.DEEPFM: DeepFM,
             ModelType.TWO_TOWER: TwoTower}
    return kinds[cfg.type](cfg)


__all__ = ["Model", "build_model"]
