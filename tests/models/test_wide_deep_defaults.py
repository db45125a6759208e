"""wide_deep's and deepfm's own defaults (models.model_config.WIDE_DEEP_DEFAULTS) fill only what a
config leaves out, survive a bundle's dump and reload, and leave lr and two_tower alone."""

from __future__ import annotations

import pytest

from models.model_config import WIDE_DEEP_DEFAULTS, ModelConfig
from tables.table_config import OptimizerConfig

SLOTS = [{"name": "u", "tower": "user"}, {"name": "i", "tower": "item"}]


@pytest.mark.parametrize("kind", [None, "wide_deep", "deepfm"])
def test_left_out_keys_take_the_wide_deep_defaults(kind: str | None) -> None:
    data = {"slots": SLOTS} if kind is None else {"type": kind, "slots": SLOTS}
    cfg = ModelConfig.model_validate(data)
    assert cfg.sparse_optimizer == OptimizerConfig(**WIDE_DEEP_DEFAULTS["sparse_optimizer"])
    assert cfg.wide_optimizer == OptimizerConfig(**WIDE_DEEP_DEFAULTS["wide_optimizer"])
    assert cfg.init_scale == WIDE_DEEP_DEFAULTS["init_scale"]
    table = cfg.table_configs()[0]
    assert table.optimizer == cfg.sparse_optimizer and table.wide_optimizer == cfg.wide_optimizer
    assert table.initializer.scale == WIDE_DEEP_DEFAULTS["init_scale"]


def test_given_keys_win_whole() -> None:
    cfg = ModelConfig.model_validate({"slots": SLOTS, "sparse_optimizer": {"kind": "adagrad", "lr": 0.05},
                                      "init_scale": 0.01})
    # a given optimizer is that optimizer (OptimizerConfig's own defaults), not merged with the model's
    assert cfg.sparse_optimizer == OptimizerConfig(kind="adagrad", lr=0.05)
    assert cfg.init_scale == 0.01
    assert cfg.wide_optimizer.lr == WIDE_DEEP_DEFAULTS["wide_optimizer"]["lr"]


def test_dump_and_reload_is_the_same_config() -> None:
    cfg = ModelConfig.model_validate({"type": "deepfm", "slots": SLOTS, "wide_optimizer": {"kind": "ftrl"}})
    assert ModelConfig.model_validate(cfg.model_dump()) == cfg
    assert ModelConfig.model_validate(cfg.model_dump(mode="json")) == cfg


@pytest.mark.parametrize("kind", ["lr", "two_tower"])
def test_other_models_keep_their_defaults(kind: str) -> None:
    cfg = ModelConfig.model_validate({"type": kind, "slots": SLOTS})
    assert cfg.sparse_optimizer == OptimizerConfig(kind="adagrad", lr=0.05)
    assert cfg.init_scale == 0.01


@pytest.mark.parametrize("kind", ["wide_deep", "deepfm"])
def test_output_bias_is_the_logit_layers_starting_bias(kind: str) -> None:
    from models import build_model

    cfg = ModelConfig.model_validate({"type": kind, "slots": SLOTS, "mlp": [8, 4], "output_bias": -0.8})
    model = build_model(cfg)
    assert model.params.value["deep.2.b"].tolist() == pytest.approx([-0.8])
    assert not model.params.value["deep.1.b"].any()  # the hidden layers' biases still start at zero
    assert not build_model(cfg.model_copy(update={"output_bias": 0.0})).params.value["deep.2.b"].any()
