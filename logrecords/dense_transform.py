"""How a dense field's raw value becomes a model input: one transform per field, written in the
schema (``slots[].transform``), copied into the model config (so a saved model and its exported
bundle carry the very statistics it trained with) and applied by :func:`apply_dense_transforms`,
the one function the trainer's and the service's feature building both call.

``log1p``: log1p(max(x, 0)), for non-negative counts (the default, the models' historical input).
``standardize``: (x - mean) / std, clipped to +-``clip`` (with ``log: true``, of log1p(max(x, 0))
instead of x, for a long right tail); ``mean`` and ``std`` are the sample's, proposed by ``schema
infer``, and the prior of the running statistics training keeps (:mod:`models.dense_statistics`),
which replace them in the model's config as training goes. On five real tabular logs this beat
log1p alone by 0.04-0.15 test AUC on four of them (bench/dense_transforms.py, bench/RESULTS.md):
log1p leaves a field's scale and offset to the first layer.
``none``: x itself, clipped to +-``limit``, for values already on a unit scale (a rate in [0, 1]).

A non-finite value (NaN, +-inf) reads as 0 before any transform, as the parsers read an absent one.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Annotated, Literal

import numpy as np
from pydantic import Field

from core.yaml_config import FrozenModel

DEFAULT_PRIOR_COUNT = 10_000  # schema infer's default sample: the values behind a proposed mean and std
FLAT_LOG_SPAN = 0.05  # a positive field whose log1p spans less than this share of its largest log1p is ~constant


class Log1pTransform(FrozenModel):
    """log1p(max(x, 0)): a non-negative, heavy-tailed count."""

    kind: Literal["log1p"] = "log1p"


class StandardizeTransform(FrozenModel):
    """(v - mean) / std, clipped to +-clip, where v is x, or log1p(max(x, 0)) with ``log``."""

    kind: Literal["standardize"] = "standardize"
    log: bool = Field(False, description="Standardize log1p(max(x, 0)) instead of x (a long right tail: amounts, "
                                         "incomes); mean, std and the running statistics are then the logs'.")
    mean: float = Field(description="Subtracted from every value (the sample mean `schema infer` proposes).")
    std: float = Field(gt=0.0, description="The centred value is divided by this (the sample's standard deviation).")
    clip: float = Field(5.0, gt=0.0, description="The standardized value is clipped to [-clip, clip].")
    prior_count: int = Field(
        DEFAULT_PRIOR_COUNT, ge=0,
        description="The values `mean` and `std` summarise: training's running statistics start from them as from "
                    "this many values (0: from the first batch). In a trained model's config, the values behind its "
                    "mean and std.")


class IdentityTransform(FrozenModel):
    """x itself, clipped to +-limit: a value already on a unit scale, such as a rate in [0, 1]."""

    kind: Literal["none"] = "none"
    limit: float = Field(1e4, gt=0.0, description="The value is clipped to [-limit, limit].")


DenseTransform = Annotated[
    Log1pTransform | StandardizeTransform | IdentityTransform,
    Field(discriminator="kind"),
]


@lru_cache(maxsize=64)
def _plan(transforms: tuple[DenseTransform, ...]) -> tuple[np.ndarray, ...]:
    """Column indices per kind, the standardize/none columns' constants (float32) and which standardize
    columns take logs first, read-only."""
    log1p = [j for j, t in enumerate(transforms) if isinstance(t, Log1pTransform)]
    std = [j for j, t in enumerate(transforms) if isinstance(t, StandardizeTransform)]
    ident = [j for j, t in enumerate(transforms) if isinstance(t, IdentityTransform)]
    arrays = (
        np.array(log1p, np.int64), np.array(std, np.int64), np.array(ident, np.int64),
        np.array([transforms[j].mean for j in std], np.float32),
        np.array([1.0 / transforms[j].std for j in std], np.float32),
        np.array([transforms[j].clip for j in std], np.float32),
        np.array([transforms[j].limit for j in ident], np.float32),
        np.array([transforms[j].log for j in std], np.bool_),
    )
    for a in arrays:
        a.flags.writeable = False
    return arrays


def apply_dense_transforms(dense: np.ndarray, transforms: tuple[DenseTransform, ...]) -> np.ndarray:
    """A fresh float32 (n, d) array: column j of ``dense`` (float32 (n, d)) through ``transforms[j]``;
    with no transforms, every column through log1p. A non-finite value reads as 0."""
    dense = finite_or_zero(dense)
    if not transforms:
        return np.log1p(np.maximum(dense, np.float32(0.0)))  # float32 in, float32 out: a fresh array
    if len(transforms) != dense.shape[1]:
        raise ValueError(f"{len(transforms)} dense transforms for {dense.shape[1]} dense inputs")
    log1p, std, ident, mean, inv_std, clip, limit, std_log = _plan(transforms)
    out = np.empty_like(dense)
    out[:, log1p] = np.log1p(np.maximum(dense[:, log1p], np.float32(0.0)))
    values = dense[:, std]
    if std_log.any():
        values[:, std_log] = np.log1p(np.maximum(values[:, std_log], np.float32(0.0)))  # a copy: fancy indexing
    out[:, std] = np.clip((values - mean) * inv_std, -clip, clip)
    out[:, ident] = np.clip(dense[:, ident], -limit, limit)
    return out


def finite_or_zero(dense: np.ndarray) -> np.ndarray:
    """``dense`` with each non-finite value (NaN, +-inf) as 0, as the parsers read an absent value;
    ``dense`` itself when every value is finite (the usual case: one pass to check)."""
    finite = np.isfinite(dense)
    if finite.all():
        return dense
    return np.where(finite, dense, dense.dtype.type(0))
