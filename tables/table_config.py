"""Typed configuration of sparse and dense tables.

A table's config fixes its row layout (dim, optional wide weight), its update rule, its
initializer and its feature lifecycle (admission and eviction). Everything is frozen and
unknown keys are errors (see :mod:`core.yaml_config`).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from core.yaml_config import FrozenModel


class InitializerConfig(FrozenModel):
    """How a new row is filled. Deterministic per (table seed, key): a row re-created after
    eviction is bit-identical to the first one."""

    kind: Literal["zeros", "uniform", "normal"] = "uniform"
    scale: float = Field(0.01, ge=0.0)  # uniform in [-scale, scale], or normal with std = scale


class OptimizerConfig(FrozenModel):
    """Server-side update rule applied on push.

    - sgd:     w -= lr * g
    - adagrad: ``accumulator: row`` (the default): one accumulator per row (Paddle's sparse rule,
      TorchRec's rowwise Adagrad): a += mean(g^2); w -= lr * g / (sqrt(a) + eps).
      ``accumulator: element``: one per element (TensorFlow's sparse Adagrad): a_j += g_j^2;
      w_j -= lr * g_j / (sqrt(a_j) + eps); a row then holds ``dim`` accumulator floats, not 1.
      Dense arrays always keep one per element (every element is updated every step).
    - adam:    per-element moments, per-row bias-correction powers
    - ftrl:    FTRL-Proximal (McMahan et al. 2013), per-element z and n; for wide weights
    ``l2`` adds ``l2 * w`` to the gradient (ftrl uses it in its closed form instead).
    ``grad_clip`` clips each gradient element to [-grad_clip, grad_clip] after duplicate
    keys were summed.
    """

    kind: Literal["sgd", "adagrad", "adam", "ftrl"] = Field(
        "adagrad", description="Update rule: `sgd`, `adagrad`, `adam` or `ftrl` (FTRL-Proximal).")
    lr: float = Field(0.05, gt=0.0, description="Learning rate.")
    l2: float = Field(0.0, ge=0.0,
                      description="L2 regularisation: adds l2 * w to the gradient (ftrl: in its closed form).")
    grad_clip: float | None = Field(None, gt=0.0,
                                    description="Clips each gradient element to [-grad_clip, grad_clip] once "
                                                "duplicate keys are summed; left out, none.")
    eps: float = Field(1e-8, gt=0.0, description="Added to the denominator of adagrad's and adam's step.")
    initial_accumulator: float = Field(0.0, ge=0.0, description="adagrad: the accumulators' starting value.")
    accumulator: Literal["row", "element"] = Field(
        "row", description="adagrad on sparse tables: one accumulator per `row` or one per `element`.")
    beta1: float = Field(0.9, ge=0.0, lt=1.0, description="adam: the first moment's decay.")
    beta2: float = Field(0.999, ge=0.0, lt=1.0, description="adam: the second moment's decay.")
    ftrl_beta: float = Field(1.0, ge=0.0, description="ftrl: the beta of its per-coordinate learning rate.")
    l1: float = Field(0.0, ge=0.0, description="ftrl: L1 regularisation strength.")


# What a dense array runs unless its config names another (models, the PS client and shard agree).
DEFAULT_DENSE_OPTIMIZER = OptimizerConfig(kind="adam", lr=1e-3)


class AlwaysAdmission(FrozenModel):
    """Every id gets a row on its first push."""

    policy: Literal["always"] = "always"


class CountAdmission(FrozenModel):
    """An id gets a row once it was pushed ``min_count`` times (counting each occurrence's
    show, 1 when no shows are given). Pending counts live in a count-min sketch of fixed size."""

    policy: Literal["count"] = "count"
    min_count: float = Field(3.0, gt=0.0)
    sketch_width: int = Field(1 << 20, ge=64, le=1 << 30)
    sketch_depth: int = Field(4, ge=1, le=16)


class ProbabilityAdmission(FrozenModel):
    """Each push of an unknown id admits it with probability ``probability``."""

    policy: Literal["probability"] = "probability"
    probability: float = Field(0.1, gt=0.0, le=1.0)


class ScoreAdmission(FrozenModel):
    """Paddle's embedx_threshold idea: admit once
    ``(show - click) * nonclick_coeff + click * click_coeff >= threshold``,
    with pending shows and clicks in count-min sketches."""

    policy: Literal["score"] = "score"
    threshold: float = Field(1.0, gt=0.0)
    nonclick_coeff: float = Field(0.1, ge=0.0)
    click_coeff: float = Field(1.0, ge=0.0)
    sketch_width: int = Field(1 << 20, ge=64, le=1 << 30)
    sketch_depth: int = Field(4, ge=1, le=16)


AdmissionConfig = Annotated[
    AlwaysAdmission | CountAdmission | ProbabilityAdmission | ScoreAdmission,
    Field(discriminator="policy"),
]


class EvictionConfig(FrozenModel):
    """Rules run by ``shrink()``; a row goes when any rule selects it.

    - ``ttl_passes``: unseen (no push) for more than this many passes;
    - ``delete_threshold``: decayed score below it (score as in ScoreAdmission's coefficients);
    - ``max_rows``: the lowest-score (or least recently seen, ``budget_order``) rows go
      until the table is at most this size.

    And a byte budget enforced on every push, when rows are created (:mod:`tables.budget`):
    ``max_bytes`` bounds what the table holds (rows at capacity, index, optimizer state,
    sketches, tombstones). Once no new row fits, ``over_budget: refuse`` refuses new ids
    (they keep reading their initializer row; counted in ``refused_by_budget``), ``evict``
    evicts the coldest rows by ``budget_order`` (counted in ``evicted_by_budget``, with
    tombstones like shrink's) and refuses only what still does not fit.
    """

    ttl_passes: int | None = Field(None, ge=0)
    delete_threshold: float | None = Field(None, ge=0.0)
    max_rows: int | None = Field(None, ge=0)
    max_bytes: int | None = Field(None, ge=1)
    over_budget: Literal["refuse", "evict"] = "evict"
    budget_order: Literal["score", "lru"] = "score"
    nonclick_coeff: float = Field(0.1, ge=0.0)
    click_coeff: float = Field(1.0, ge=0.0)


class TableConfig(FrozenModel):
    """One sparse table: uint64 ids to float32 rows of ``dim`` (+1 wide weight in column 0)."""

    name: str = Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9_.\-]+$")
    dim: int = Field(ge=1, le=512)
    wide: bool = False
    seed: int = Field(0, ge=0, lt=1 << 63)
    initializer: InitializerConfig = InitializerConfig()
    optimizer: OptimizerConfig = OptimizerConfig()
    wide_optimizer: OptimizerConfig = OptimizerConfig(kind="ftrl", lr=0.05)
    wide_initializer: InitializerConfig = InitializerConfig(kind="zeros")
    admission: AdmissionConfig = AlwaysAdmission()
    eviction: EvictionConfig = EvictionConfig()
    show_click_decay: float = Field(0.98, gt=0.0, le=1.0)  # applied to show/click at each end_pass()
    nonfinite: Literal["reject", "skip"] = "reject"  # NaN/Inf gradients: refuse the push, or drop those rows
    initial_capacity: int = Field(1024, ge=16)

    @property
    def width(self) -> int:
        """Columns returned by pull: the wide weight first (when present), then the embedding."""
        return self.dim + (1 if self.wide else 0)


class DenseTableConfig(FrozenModel):
    """A named dense float32 array updated by the same optimizers (per element)."""

    name: str = Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9_.\-/]+$")
    optimizer: OptimizerConfig = DEFAULT_DENSE_OPTIMIZER
