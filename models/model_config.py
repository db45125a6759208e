"""What a model is: its type, slots and their embedding dims, MLP sizes and optimizers.

``ModelConfig`` is the ``model:`` section of the training YAML and what an inference bundle
carries (``ModelConfig.model_dump()``): the service rebuilds the very same model from it with
:func:`models.build_model`. Unknown keys are errors naming key and file.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import Field, model_validator

from core.yaml_config import FrozenModel
from logrecords.dense_transform import DenseTransform
from tables.table_config import DEFAULT_DENSE_OPTIMIZER, OptimizerConfig, TableConfig


class ModelType(StrEnum):
    LR = "lr"
    WIDE_DEEP = "wide_deep"
    DEEPFM = "deepfm"
    TWO_TOWER = "two_tower"


_WIDE_DEEP_TYPES = (ModelType.WIDE_DEEP, "wide_deep", ModelType.DEEPFM, "deepfm")


class Pooling(StrEnum):
    SUM = "sum"
    MEAN = "mean"
    ATTENTION = "attention"  # two_tower user tower only: models.history_pooling


class Tower(StrEnum):
    """Two-tower only: which tower a slot feeds (others ignore it)."""

    USER = "user"
    ITEM = "item"


class RetrievalLossKind(StrEnum):
    """What trains the two towers: the click logit (pointwise), the softmax over candidates, or both."""

    POINTWISE = "pointwise"
    SOFTMAX = "softmax"
    BOTH = "both"


class RetrievalConfig(FrozenModel):
    """Two-tower only: how the towers learn retrieval (``models/retrieval_loss.py``).

    The click logit ``a * scale * <u, v> + wide + b`` (``scale`` = 1/temperature when normalised,
    else 1; ``wide``: the record's ids' wide weights) always serves /v1/predict; with ``loss:
    softmax`` only the head (a, the wide weights, b) learns from the clicks, the towers from the
    softmax; ``both`` adds ``pointwise_weight`` x the click loss to the towers.

    The defaults recalled best in-process on a planted interaction stream (bench/RESULTS.md):
    softmax + logQ on the dot product at temperature 0.05 recalled several times what the click
    loss did; a higher temperature, sampled negatives, L2-normalised towers or ``both`` did no
    better. On a click stream whose items are drawn independently
    of the user (the built-in generator's), the softmax has no choice to learn and the click
    AUC stays near 0.5: use ``loss: pointwise`` there.
    """

    loss: RetrievalLossKind = Field(RetrievalLossKind.SOFTMAX,
                                    description="What trains the towers: `softmax` over candidates, `pointwise` (the "
                                                "click loss) or `both`.")
    pointwise_weight: float = Field(1.0, ge=0.0,
                                    description="With `loss: both`, the weight of the click loss added to the towers' "
                                                "softmax.")
    # the softmax's weight of a record labelled 0. A record is something the user chose in an interaction log (a
    # rating, a play: label 0 = chose it and did not like it), and the softmax learns which items a user chooses
    # from every choice; in an impression log (shown, clicked?) label 0 is an item passed over: keep 0 (positives
    # only). Not the likes' head: /v1/predict learns the label from every record whatever this says. Off by default:
    # it helped on planted data and hurt on MovieLens 100K, where a low rating says what a user does not want
    # (bench/retrieval.py's arms label0-*, bench/RESULTS.md).
    label0_weight: float = Field(0.0, ge=0.0, le=1.0,
                                 description="The softmax's weight of a label-0 record: 0 learns from the positives "
                                             "only.")
    temperature: float = Field(0.05, gt=0.0, le=100.0,
                               description="The softmax's temperature: logits are scores / temperature.")
    normalize: bool = Field(False,
                            description="L2-normalise the towers' outputs (cosine scores, also in the served vectors).")
    logq: bool = Field(True,
                       description="Subtract each candidate's log expected count from its logit (Yi et al. 2019).")
    negatives: int = Field(0, ge=0, le=65536,
                           description="Items sampled per step from the catalogue, besides the batch's own.")
    catalogue_size: int = Field(1 << 16, ge=1, description="Items kept to sample negatives from (a power of two).")
    catalogue_max_ids: int = Field(16, ge=1, le=1024, description="Ids kept per item slot of a kept item.")
    frequency_buckets: int = Field(1 << 18, ge=1,
                                   description="Buckets per hash of the streaming item-frequency estimate (a power of "
                                               "two).")
    frequency_hashes: int = Field(2, ge=1, le=8, description="Hash functions of the streaming item-frequency estimate.")
    # the estimate's moving-average rate: ~1/alpha gaps per item. 0.1, not the paper's 0.01: where items' rates
    # drift (new releases) the correction must subtract an item's rate now, or the towers learn a hot item's score
    # too low; it recalled better than 0.01 on MovieLens 100K, end to end and in-process (bench/RESULTS.md).
    # Per occurrence in the whole stream: each of W workers (reading 1/W of it) averages at 1 - (1 - alpha)^W
    # (models.item_frequency.reader_alpha), so the estimate spans the same stretch of the stream whatever W.
    frequency_alpha: float = Field(0.1, gt=0.0, le=1.0,
                                   description="The item-frequency estimate's moving-average rate: each item's rate "
                                               "averages about its last 1/alpha gaps.")
    # with a parameter server: one estimate for the whole job, in the PS (rate rows of an id-rows table that every
    # worker counts its steps into, trainer.shared_frequency; Yi et al. keep the arrays on the parameter servers),
    # so each worker corrects by the rate of the whole stream; false: each worker its own, at reader_alpha. Without
    # a PS (one process) the worker's own is the job's. In-process it brings two workers close to one worker's
    # recall; end to end its gain is within the noise (bench/RESULTS.md).
    shared_frequency: bool = Field(True,
                                   description="One item-frequency estimate for the job, in the PS, that every "
                                               "trainer counts into; false: each trainer its own.")
    # a learned per-id bias in the softmax's logit, <u, v> / temperature + b (b: the sum of the item's
    # item-tower ids' rows in the table ITEM_BIAS_TABLE, updated by this rule; None: no bias). Served as
    # one more index column: item [v, temperature * b], user query [u, 1] (models.two_tower). Off by default:
    # with logQ the towers already learn the items' popularity (bench/retrieval.py end to end, Adagrad lr 0.2:
    # planted 0.098-0.104 vs 0.101-0.104, MovieLens 0.068 vs 0.067-0.068; arm item-bias)
    item_bias: OptimizerConfig | None = Field(
        None, description="The update rule of a learned per-item bias in the softmax's logit, served as one more "
                          "index column; left out, none.")
    # where a user's next pick follows their last ones (sessions), the attention pooling's position biases must weigh
    # the newest history items most; learned from zero at the dense lr they stay near the mean pooling
    # (models.history_pooling), so they start as a decay by position instead and the dense steps refine it
    history_half_life: float | None = Field(
        None, gt=0.0, le=1000.0,
        description="Attention-pooled history: its position biases start at -ln(2) * position / this, so an item "
                    "weighs half as much as the one after it this many positions on (newest first); left out, they "
                    "start at zero (the mean).")
    # the half-life of each item's decayed record count (models.item_popularity), which bundles carry and the
    # service adds to a known user's scores (service.popularity_prior); 5 days: near the best recent-popularity
    # list of MovieLens 100K's validation split (half-lives of 1 to 30 days), never its holdout
    popularity_half_life_s: float = Field(5 * 86400.0, gt=0.0,
                                          description="Seconds of event time in which an item's decayed record "
                                                      "count (exported with each bundle for the served popularity "
                                                      "prior) halves.")

    @model_validator(mode="after")
    def _powers_of_two(self) -> RetrievalConfig:
        for name, v in (("catalogue_size", self.catalogue_size), ("frequency_buckets", self.frequency_buckets)):
            if v & (v - 1):
                raise ValueError(f"{name} must be a power of two, got {v}")
        return self


ITEM_BIAS_TABLE = "bias.items"  # two_tower's retrieval.item_bias rows: 1 float per item-tower id


def item_bias_table(config: RetrievalConfig, seed: int) -> tuple[TableConfig, ...]:
    """The table of the item biases when ``config.item_bias`` asks for them (zeros at the start)."""
    if config.item_bias is None:
        return ()
    return (TableConfig(name=ITEM_BIAS_TABLE, dim=1, wide=False, seed=seed, initializer={"kind": "zeros"},
                        optimizer=config.item_bias),)


class DenseMerge(StrEnum):
    """``dense_update: local`` with several workers: how a worker's change since the last merge
    enters the PS dense vector (:mod:`trainer.dense_sync`)."""

    SUM = "sum"  # added whole (Paddle's GEO rule)
    MEAN = "mean"  # added / workers: the average of the workers' models (local SGD, FedAvg)


class DenseAverageConfig(FrozenModel):
    """``model.dense_average``: evaluate and export an exponential moving average of the dense (MLP)
    weights while training goes on with the raw ones (:mod:`trainer.dense_average`)."""

    decay: float = Field(gt=0.0, lt=1.0,
                         description="Per-step decay of the moving average: about 1 / (1 - decay) steps are averaged.")
    per_job_batch: bool = Field(True, description="With K workers each taking P dense steps per batch "
                                                  "(`dense_parts`), a worker's step decays the average by "
                                                  "decay^(K / P), so that it spans the records of about 1 / (1 - "
                                                  "decay) batches of the job, as one worker's does; false: decay per "
                                                  "step of the worker.")


class DenseOuterConfig(FrozenModel):
    """``model.dense_outer``: an outer optimizer on the merge (SlowMo, Wang et al. 2020; DiLoCo): a
    worker's share of its change since its last merge is a pseudo-gradient, and what it adds to the
    PS is ``lr`` times its Nesterov (or heavy-ball) momentum (:mod:`trainer.dense_sync`)."""

    lr: float = Field(1.0, gt=0.0, le=64.0,
                      description="The outer lr: the multiple of the merge rule's share of the change that is added.")
    momentum: float = Field(0.0, ge=0.0, lt=1.0,
                            description="The outer momentum over a worker's merges (0: none).")
    nesterov: bool = Field(True, description="Nesterov momentum (false: heavy-ball).")
    reset_moments: bool = Field(False, description="With several workers, the dense Adam's moments and step count "
                                                   "start again after every merge (false: kept across merges).")
    beta1_with_workers: float | None = Field(
        None, ge=0.0, lt=1.0, description="With several workers, the dense Adam's beta1 in place of "
                                          "`dense_optimizer.beta1` (the merge's average does the smoothing); left "
                                          "out, that one.")


class ScheduleKind(StrEnum):
    LINEAR = "linear"  # from 1 to end_factor over decay_steps, then end_factor
    INVERSE_SQRT = "inverse_sqrt"  # sqrt(decay_steps / (decay_steps + s)): halved after 3 x decay_steps


class DenseScheduleConfig(FrozenModel):
    """``model.dense_schedule``: the dense optimizer's lr as a function of the worker's step count
    (``dense_update: local``; the count is the optimizer's, kept in a pass): a linear warm-up over
    ``warmup_steps``, then ``kind``'s decay over the ``s`` steps after it (:mod:`tables.dense_optimizer`)."""

    kind: ScheduleKind = Field(ScheduleKind.LINEAR,
                               description="`linear`: from 1 to `end_factor` over `decay_steps`; `inverse_sqrt`: "
                                           "halved after 3 x `decay_steps`.")
    warmup_steps: int = Field(0, ge=0, description="Steps of linear warm-up from 0 to the full lr.")
    decay_steps: int = Field(ge=1, description="Steps the decay spans after the warm-up.")
    end_factor: float = Field(0.0, ge=0.0, le=1.0, description="linear: the lr's multiple from `decay_steps` on.")

    def factor(self, step: int) -> float:
        """The lr's multiple at optimizer step ``step`` (1 for the first)."""
        if step <= self.warmup_steps:
            return step / self.warmup_steps
        s = step - self.warmup_steps
        if self.kind is ScheduleKind.LINEAR:
            return 1.0 - (1.0 - self.end_factor) * min(s / self.decay_steps, 1.0)
        return (self.decay_steps / (self.decay_steps + s)) ** 0.5


class SlotSpec(FrozenModel):
    name: str = Field(min_length=1, description="The schema slot (or the history slot) this input reads.")
    dim: int | None = Field(None, ge=1, le=512,
                            description="The slot's embedding width; left out, the model's `embedding_dim`.")
    pooling: Pooling = Field(Pooling.SUM,
                             description="How a list slot's embeddings become one: `sum`, `mean` or `attention` "
                                         "(two_tower user tower only).")
    tower: Tower = Field(Tower.USER, description="two_tower only: the tower this slot feeds.")
    # e.g. a two_tower user id whose interests drift (Adam's steps do not decay)
    optimizer: OptimizerConfig | None = Field(
        None, description="An update rule of the slot's own, its rows in their own table `emb{dim}.{name}`; left out, "
                          "`sparse_optimizer`.")


# two_tower's defaults, measured with bench/retrieval.py's data trained in-process (recall@10, planted
# 200k events; the best baseline, ALS, 0.072): linear towers over 32-dim embeddings into 64-dim
# vectors 0.099, against the MLP [64] towers over 16 into 32 of the first version 0.082 (an MLP
# learns the dot product's geometry slower than a factorisation learns it directly: Rendle et al.,
# RecSys 2020, "Neural collaborative filtering vs. matrix factorization revisited"); MovieLens
# 0.053 against 0.049. The wide weights are the click head's per-id like rates, learned from a
# handful of events per id: at lr 0.01 they barely moved (MovieLens click AUC 0.650 at 0.01, 0.687
# at 0.1, 0.702 at 0.3; the item's own like rate alone 0.672).
TWO_TOWER_DEFAULTS: dict[str, Any] = {"embedding_dim": 32, "mlp": (), "tower_dim": 64,
                                      "wide_optimizer": {"kind": "adagrad", "lr": 0.2}}

# two_tower's user id slot where users' interests drift: its rows on Adam without momentum (an RMSprop-like
# Adagrad whose accumulator decays, ~100 updates) in a table of their own, so a user's steps do not shrink. What
# bench/retrieval.py's streamrec config, examples/two_tower*.yaml and `schema infer --user --item` give the slot
# (measured against the shared Adagrad: bench/RESULTS.md). Not a model default: the slot's optimizer is per config.
DRIFTING_USER_ID_OPTIMIZER: dict[str, Any] = {"kind": "adam", "lr": 0.007, "beta1": 0.0, "beta2": 0.99}


# wide_deep's and deepfm's sparse defaults (what their config leaves out): TensorFlow's sparse rates
# and starts (lr 0.02 for the embeddings and the wide weights, Adagrad accumulators from 1e-7, eps
# 1e-7, embeddings from uniform [-0.05, 0.05]) with one accumulator per row (TorchRec's; 1 state
# float per row, not dim). On a mean loss an id's gradient is ~1/batch of its example's: a tiny
# start lets its first steps move it (Keras' 0.1 stalled them), and lr 0.02 keeps the first steps
# of the many rare ids small. dense_merge mean: with 2 workers (dense_update local) their dense changes are
# averaged at each merge, not summed, as two changes from one base overshoot together. init 0.03 and
# dense_average 0.995 (the test set and bundles take the MLP weights' moving average over ~200 steps,
# trainer/dense_average.py) each raised bench/auc_sweep.py's test AUC in every seed (bench/RESULTS.md).
# dense_outer: with several workers each worker's Adam runs without momentum of its own (the merge averages the
# workers' steps) and keeps its second moments across merges: restarting them made every restarted step a full-size
# one, which cost more as the MLP's parts got smaller (bench/scale.py at 2 to 32 workers, bench/RESULTS.md).
WIDE_DEEP_DEFAULTS: dict[str, Any] = {
    "sparse_optimizer": {"kind": "adagrad", "lr": 0.02, "initial_accumulator": 1e-7, "eps": 1e-7},
    "wide_optimizer": {"kind": "adagrad", "lr": 0.02, "initial_accumulator": 1e-7, "eps": 1e-7},
    "init_scale": 0.03,
    "dense_merge": "mean",
    "dense_average": {"decay": 0.995},
    "dense_outer": {"beta1_with_workers": 0.0},
}


class ModelConfig(FrozenModel):
    type: ModelType = Field(ModelType.WIDE_DEEP,
                            description="`lr`, `wide_deep`, `deepfm` or `two_tower`; each type has its own defaults "
                                        "for what its section leaves out.")
    slots: tuple[SlotSpec, ...] = Field(min_length=1,
                                        description="The model's sparse inputs, each naming a schema slot.")
    n_dense: int = Field(13, ge=0,
                         description="Dense inputs; left out in the root YAML, the schema's dense field count.")
    dense_log1p: bool = Field(True, description="Each dense input x enters as log1p(max(x, 0)) (false: raw), unless "
                                                "`dense_transforms` is set.")
    dense_transforms: tuple[DenseTransform, ...] = Field(
        (), description="One transform per dense input, copied from the schema's dense fields' `transform` when "
                        "one is not log1p; training replaces a standardize one's mean and std with the running "
                        "statistics of the values it trains on, so a checkpoint and a bundle carry those it "
                        "trained with; empty: `dense_log1p` for every input.")
    embedding_dim: int = Field(8, ge=1, le=512,
                               description="Embedding width of the slots that set no `dim` of their own.")
    mlp: tuple[int, ...] = Field((400, 400, 400),
                                 description="Hidden layer sizes of the MLP (two_tower: of each tower; empty: linear).")
    tower_dim: int = Field(32, ge=1, description="two_tower: the size of the user and item vectors.")
    dense_optimizer: OptimizerConfig = Field(
        DEFAULT_DENSE_OPTIMIZER, description="Update rule of the dense (MLP) weights.")
    sparse_optimizer: OptimizerConfig = Field(
        OptimizerConfig(kind="adagrad", lr=0.05), description="Update rule of the embedding rows.")
    # adagrad, not ftrl: ftrl's beta=1 swamps the small per-id gradients of a mean loss. lr 0.01, not 0.05:
    # an id's first adagrad step is lr whatever its gradient, and most ids are rare, so 0.05 overfits them
    # (bench/RESULTS.md, on bench/train.py's data)
    # (these optimizer and init defaults are lr's; wide_deep/deepfm: WIDE_DEEP_DEFAULTS; two_tower: TWO_TOWER_DEFAULTS)
    wide_optimizer: OptimizerConfig = Field(OptimizerConfig(kind="adagrad", lr=0.01),
                                            description="Update rule of the wide (per-id linear) weights.")
    init_scale: float = Field(0.01, ge=0.0,
                              description="New embedding rows start uniform in [-init_scale, init_scale].")
    output_bias: float = Field(0.0, ge=-20.0, le=20.0,
                               description="wide_deep/deepfm: the logit's starting bias, the log-odds of the expected "
                                           "click rate (0: p = 0.5).")
    dense_merge: DenseMerge = Field(DenseMerge.SUM,
                                    description="`dense_update: local` with several workers: a worker's dense change "
                                                "enters the PS whole (`sum`) or averaged (`mean`).")
    dense_average: DenseAverageConfig | None = Field(
        None, description="Evaluate and export a moving average of the dense weights; left out, the raw weights.")
    dense_schedule: DenseScheduleConfig | None = Field(
        None, description="The dense optimizer's lr over the steps (warm-up, then decay); left out, a constant lr.")
    dense_outer: DenseOuterConfig | None = Field(
        None, description="`dense_update: local`: an outer optimizer on each merged change (outer lr, momentum); "
                          "left out, the change is added as `dense_merge` says.")
    dense_ps_lr_scaling: Literal["inverse_sqrt", "none"] = Field(
        "inverse_sqrt", description="`dense_update: ps` in async or geo mode: the shard steps the dense weights at "
                                    "lr / sqrt(K) for each push of K workers (`inverse_sqrt`; K pushes from stale "
                                    "copies act as momentum, so the full lr overshoots as K grows) or at lr (`none`).")
    retrieval: RetrievalConfig = Field(RetrievalConfig(), description="two_tower only: how the towers learn retrieval.")
    seed: int = Field(0, ge=0, description="Seed of the initial rows and weights.")

    @model_validator(mode="before")
    @classmethod
    def _two_tower_defaults(cls, data: Any) -> Any:
        """two_tower's own defaults for what its config leaves out (TWO_TOWER_DEFAULTS)."""
        if isinstance(data, dict) and data.get("type") in (ModelType.TWO_TOWER, "two_tower"):
            return {**TWO_TOWER_DEFAULTS, **data}
        return data

    @model_validator(mode="before")
    @classmethod
    def _wide_deep_defaults(cls, data: Any) -> Any:
        """wide_deep's and deepfm's own defaults for what their config leaves out (WIDE_DEEP_DEFAULTS)."""
        if isinstance(data, dict) and data.get("type", ModelType.WIDE_DEEP) in _WIDE_DEEP_TYPES:
            return {**WIDE_DEEP_DEFAULTS, **data}
        return data

    @model_validator(mode="after")
    def _check(self) -> ModelConfig:
        names = [s.name for s in self.slots]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"duplicate slot names: {dupes}")
        if self.type is ModelType.DEEPFM and len({self.dim_of(s) for s in self.slots}) != 1:
            raise ValueError("deepfm needs one embedding dim for every slot (FM inner products)")
        if self.type is ModelType.TWO_TOWER:
            towers = {s.tower for s in self.slots}
            if towers != {Tower.USER, Tower.ITEM}:
                raise ValueError("two_tower needs at least one user slot and one item slot")
        wrong = [s.name for s in self.slots if s.pooling is Pooling.ATTENTION
                 and (self.type is not ModelType.TWO_TOWER or s.tower is not Tower.USER)]
        if wrong:
            raise ValueError(f"pooling: attention is for two_tower user-tower slots only: {wrong}")
        if self.dense_transforms and len(self.dense_transforms) != self.n_dense:
            raise ValueError(f"dense_transforms has {len(self.dense_transforms)} entries for n_dense {self.n_dense}")
        return self

    def dim_of(self, slot: SlotSpec) -> int:
        if self.type is ModelType.LR:
            return 1
        return slot.dim if slot.dim is not None else self.embedding_dim

    @property
    def wide(self) -> bool:
        """Tables carry a wide (linear) weight per id in column 0."""
        # two_tower: the click head's per-id weights (what /v1/predict adds to the towers' affinity)
        return self.type in (ModelType.WIDE_DEEP, ModelType.DEEPFM, ModelType.TWO_TOWER)

    def table_name(self, slot: SlotSpec) -> str:
        return f"emb{self.dim_of(slot)}" + (f".{slot.name}" if slot.optimizer is not None else "")

    def table_configs(self) -> tuple[TableConfig, ...]:
        """The sparse tables the PS must serve: one per distinct embedding dim, and one per slot with
        an optimizer of its own."""
        dims = sorted({self.dim_of(s) for s in self.slots if s.optimizer is None})
        # LR's single column is a linear weight: it starts at zero like any wide weight
        init = {"kind": "zeros"} if self.type is ModelType.LR else {"kind": "uniform", "scale": self.init_scale}
        shared = tuple(
            TableConfig(name=f"emb{d}", dim=d, wide=self.wide, seed=self.seed, initializer=init,
                        optimizer=self.sparse_optimizer, wide_optimizer=self.wide_optimizer)
            for d in dims
        )
        own = tuple(
            TableConfig(name=self.table_name(s), dim=self.dim_of(s), wide=self.wide, seed=self.seed, initializer=init,
                        optimizer=s.optimizer, wide_optimizer=self.wide_optimizer)
            for s in self.slots if s.optimizer is not None
        )
        bias = item_bias_table(self.retrieval, self.seed) if self.type is ModelType.TWO_TOWER else ()
        return shared + own + bias
