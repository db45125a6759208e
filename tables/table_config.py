"""Typed configuration of sparse and dense tables.

A table's config fixes its row layout (dim, optional wide weight), its update rule, its
initializer and its feature lifecycle (admission and eviction). Everything is frozen and
unknown keys are errors (see :mod:`core.yaml_config`).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

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
        "adagrad", description="Update rule: `sgd`, `adagrad`, `adam` or `ftrl` (FTRL-Proximal); a key of another "
                               "rule (e.g. `beta1` with `sgd`) is refused.")
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

    @model_validator(mode="after")
    def _keys_of_its_kind(self) -> OptimizerConfig:
        # A key of another rule would be ignored: refused instead, unless it holds its default (a dumped
        # config holds every key, and is read again by the roles it is rendered for).
        own = RULE_KEYS[self.kind]
        foreign = sorted(k for k in _ALL_RULE_KEYS - own if getattr(self, k) != type(self).model_fields[k].default)
        if foreign:
            keys = ", ".join(sorted(own)) or "none"
            raise ValueError(f"{', '.join(foreign)}: not a key of the {self.kind} optimizer (its own keys: {keys}; "
                             f"every rule takes {', '.join(sorted(COMMON_KEYS))})")
        return self


COMMON_KEYS = frozenset({"kind", "lr", "l2", "grad_clip"})
RULE_KEYS: dict[str, frozenset[str]] = {  # each rule's own keys besides the common ones
    "sgd": frozenset(),
    "adagrad": frozenset({"eps", "initial_accumulator", "accumulator"}),
    "adam": frozenset({"eps", "beta1", "beta2"}),
    "ftrl": frozenset({"ftrl_beta", "l1"}),
}
_ALL_RULE_KEYS = frozenset().union(*RULE_KEYS.values())


# What a dense array runs unless its config names another (models, the PS client and shard agree).
DEFAULT_DENSE_OPTIMIZER = OptimizerConfig(kind="adam", lr=1e-3)


class AlwaysAdmission(FrozenModel):
    """Every id gets a row on its first push."""

    policy: Literal["always"] = "always"


class CountAdmission(FrozenModel):
    """An id gets a row once it was pushed ``min_count`` times (counting each occurrence's
    show, 1 when no shows are given). Pending counts live in a count-min sketch of fixed size."""

    policy: Literal["count"] = "count"
    min_count: float = Field(3.0, gt=0.0, description="Pushes (or shows) an id needs before it gets a row.")
    sketch_width: int = Field(1 << 20, ge=64, le=1 << 30, description="Counters per row of the pending-count sketch.")
    sketch_depth: int = Field(4, ge=1, le=16, description="Rows (hash functions) of the pending-count sketch.")


class ProbabilityAdmission(FrozenModel):
    """Each push of an unknown id admits it with probability ``probability``."""

    policy: Literal["probability"] = "probability"
    probability: float = Field(0.1, gt=0.0, le=1.0, description="Chance that one push of an unknown id admits it.")


class ScoreAdmission(FrozenModel):
    """Paddle's embedx_threshold idea: admit once
    ``(show - click) * nonclick_coeff + click * click_coeff >= threshold``,
    with pending shows and clicks in count-min sketches."""

    policy: Literal["score"] = "score"
    threshold: float = Field(1.0, gt=0.0, description="The score an id needs before it gets a row.")
    nonclick_coeff: float = Field(0.1, ge=0.0, description="Score of a show without a click.")
    click_coeff: float = Field(1.0, ge=0.0, description="Score of a click.")
    sketch_width: int = Field(1 << 20, ge=64, le=1 << 30, description="Counters per row of the pending sketches.")
    sketch_depth: int = Field(4, ge=1, le=16, description="Rows (hash functions) of the pending sketches.")


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

    ttl_passes: int | None = Field(None, ge=0,
                                   description="A row unseen (no push) for more than this many passes goes at the "
                                               "next shrink (every `train.passes.base_every` passes); left out, none.")
    delete_threshold: float | None = Field(None, ge=0.0,
                                           description="A row whose decayed show/click score is below this goes at "
                                                       "the next shrink; left out, none.")
    max_rows: int | None = Field(None, ge=0,
                                 description="At each shrink the coldest rows (`budget_order`) go until the table "
                                             "holds at most this many; left out, no bound.")
    max_bytes: int | None = Field(None, ge=1,
                                  description="Bytes the table may hold on each shard (rows, index, optimizer state, "
                                              "sketches), enforced on every push; left out, the shard's share.")
    over_budget: Literal["refuse", "evict"] = Field(
        "evict", description="A full table: `evict` the coldest rows for new ids, or `refuse` new ids.")
    budget_order: Literal["score", "lru"] = Field(
        "score", description="Which rows are coldest: lowest show/click `score`, or least recently seen (`lru`).")
    nonclick_coeff: float = Field(0.1, ge=0.0, description="The eviction score of a show without a click.")
    click_coeff: float = Field(1.0, ge=0.0, description="The eviction score of a click.")


class DiskTierConfig(FrozenModel):
    """Where a table's disk tier keeps its rows (:mod:`tables.disk_tier`), and how much it may."""

    path: str = Field(min_length=1, description="Directory of the disk tier's files (one per table and process, "
                                                "started empty: saves hold the rows, not these files).")
    max_bytes: int = Field(16 << 30, ge=1, description="Bytes the disk tier's file may take per table and shard: its "
                                                       "rows and the free records its writes go to (a quarter of the "
                                                       "file while under this); a full tier evicts its coldest rows "
                                                       "(score) for new ones.")


class TierConfig(FrozenModel):
    """A second tier under the RAM byte budget (``eviction.max_bytes`` or the shard's share): the
    coldest rows move to disk, instead of being evicted, once RAM reaches the budget, and back
    when pulled a second time lately (a pull reads them in place, a push updates them on disk).
    The budget holds the table's largest recent call's temporaries too (at most a quarter of it):
    RAM rows make room for them, so the process stays within the budget while a call runs."""

    disk: DiskTierConfig = Field(description="The disk tier: `path` and `max_bytes`.")
    low_water: float = Field(0.9, gt=0.0, lt=1.0,
                             description="A RAM tier at its byte budget moves its coldest rows to disk until it "
                                         "holds this share of the budget's rows.")


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
    tier: TierConfig | None = None  # a disk tier under the RAM budget; None: RAM only

    @property
    def width(self) -> int:
        """Columns returned by pull: the wide weight first (when present), then the embedding."""
        return self.dim + (1 if self.wide else 0)


class DenseTableConfig(FrozenModel):
    """A named dense float32 array updated by the same optimizers (per element)."""

    name: str = Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9_.\-/]+$")
    optimizer: OptimizerConfig = DEFAULT_DENSE_OPTIMIZER


class TablePolicy(FrozenModel):
    """A table's feature lifecycle and update rule as the root YAML's ``ps.tables`` sets them. A key
    left out keeps what ``ps.tables.default`` sets, else what the model gives the table; a section
    a table sets (``eviction``, an optimizer) replaces ``default``'s whole, so what reads is what runs."""

    admission: AdmissionConfig | None = Field(
        None, description="Which new ids get a row: `{policy: always}`, `{policy: count, min_count}`, "
                          "`{policy: probability, probability}` or `{policy: score, threshold}`; left out, `always`.")
    eviction: EvictionConfig | None = Field(
        None, description="Which rows go: `ttl_passes`, `delete_threshold` (score) and `max_rows` at each shrink, "
                          "`max_bytes` on every push; left out, none.")
    nonfinite: Literal["reject", "skip"] | None = Field(
        None, description="A push with NaN/Inf gradients: `reject` refuses it whole, `skip` drops those rows; "
                          "left out, `reject`.")
    show_click_decay: float | None = Field(
        None, gt=0.0, le=1.0, description="Factor applied to each row's show and click counts at every pass end; "
                                          "left out, 0.98.")
    optimizer: OptimizerConfig | None = Field(
        None, description="The rows' update rule; left out, the model's (`sparse_optimizer`, or the slot's own).")
    wide_optimizer: OptimizerConfig | None = Field(
        None, description="The wide weights' update rule; left out, the model's `wide_optimizer`.")
    tier: TierConfig | None = Field(
        None, description="A disk tier under the RAM byte budget: `{disk: {path, max_bytes}, low_water}`; "
                          "left out, RAM only (rows over the budget are evicted).")

    def over(self, base: TablePolicy) -> TablePolicy:
        """This policy, with what it leaves out taken from ``base``."""
        return TablePolicy.model_validate({k: getattr(self, k) if getattr(self, k) is not None else getattr(base, k)
                                           for k in TablePolicy.model_fields})

    def apply(self, table: TableConfig) -> TableConfig:
        """``table`` with what this policy sets."""
        update = {k: getattr(self, k) for k in TablePolicy.model_fields if getattr(self, k) is not None}
        return table.model_copy(update=update)
