"""The built-in models and ``build_model``: the one way to get a model from its config."""

from __future__ import annotations

from typing import Any

from tables.yaml_config import validate_config
from trainer.config import ModelConfig, ModelType
from trainer.models.base import Model


def build_model(model_config: dict[str, Any] | ModelConfig) -> Model:
    """A freshly initialized model (deterministic for the config's seed) from a ModelConfig or its dict."""
    from trainer.models.deepfm import DeepFM
    from trainer.models.lr import LogisticRegression
    from trainer.models.two_tower import TwoTower
    from trainer.models.wide_deep import WideDeep

    cfg = model_config if isinstance(model_config, ModelConfig) else validate_config(model_config, ModelConfig,
                                                                                     "model config")
    kinds = {ModelType.LR: LogisticRegression, ModelType.WIDE_DEEP: WideDeep, ModelType.DEEPFM: DeepFM,
             ModelType.TWO_TOWER: TwoTower}
    return kinds[cfg.type](cfg)


__all__ = ["Model", "build_model"]
