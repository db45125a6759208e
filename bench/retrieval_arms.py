"""The streamrec YAML of each arm of ``bench/retrieval.py``: one base config per data set (the
schema of its records, a two_tower model over its user and item fields, `up` with 2 shards and 2
trainers), and the ablation arms as variations of it: ``train.model`` overrides (the loss and
logQ: ``train.model.retrieval``), for the history arms (the default among them) the schema's
``history`` (the users' recent positive items, joined from the stream) with its list slot in the
user tower, and for a job arm (``one-trainer``) the ``up``/``kafka``/``train`` keys it names.

An arm whose config the schema refuses (its option does not exist in this checkout) is reported
as not available, with the validation error: never run as something else.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic import ValidationError

from bench.retrieval_data import Interactions
from launcher.system_config import StreamrecConfig
from models.model_config import DRIFTING_USER_ID_OPTIMIZER

HISTORY_LENGTH = 50
DEFAULT_HISTORY_LENGTH = 20  # the default arm's: the last 20 positives (drift: the recent ones)


@dataclass(frozen=True)
class Arm:
    name: str
    model: dict[str, Any] = field(default_factory=dict)  # train.model overrides (nested mappings merge)
    history: bool = False  # schema.history + its slot in the user tower
    what: str = ""
    history_length: int = HISTORY_LENGTH
    pooling: str = "mean"  # the history slot's: mean, or attention (models.history_pooling)
    user_id_optimizer: dict[str, Any] | None = None  # the user_id slot's own optimizer (its rows' own table)
    job: dict[str, Any] = field(default_factory=dict)  # overrides outside train.model (up, kafka, train)
    history_embeddings: str = "item"  # schema.history.embeddings: the item ids' own rows, or rows of its own
    without_slots: tuple[str, ...] = ()  # slots left out of the model's towers (still in the schema)


def _loss(kind: str, **more: Any) -> dict[str, Any]:
    return {"retrieval": {"loss": kind, **more}}


def _label0(weight: float) -> dict[str, Any]:
    return {"retrieval": {"label0_weight": weight}}


EVERY_RECORD_HISTORY: dict[str, Any] = {"schema": {"history": {"positive_above": -1.0}}}  # any label enters it


# The user id's rows on Adam in a table of their own (models.model_config.SlotSpec.optimizer): Adam's steps do
# not decay as row-wise Adagrad's do, so a drifting user's row follows. End to end (2026-11-24, load 5-8) with the
# history attention-pooled: planted 0.099-0.104 (mean 0.101, 5 runs, lr 0.01 or 0.007) against the default's
# 0.095-0.101 (0.097, higher in each of the 5 paired runs), but MovieLens 0.063-0.067 against 0.065-0.070 (4
# paired runs; its 21 seen users fell): not the default. (Measured with the history's position biases
# starting at -0.1 p, since reverted: models.history_pooling.)
USER_ID_ADAM: dict[str, Any] = {"kind": "adam", "lr": 0.007}

# A learned per-id item bias in the softmax's logit (models.two_tower, retrieval.item_bias), served as one more
# index column. In-process (2026-11-24, /work/tools/exp/inproc.py, seeds 0-1): planted 0.0998 (lr 0.2) and
# 0.0996 (0.05) against the default's 0.1006; MovieLens 0.0676 / 0.0705 (lr 0.2) against 0.0688 / 0.0677:
# no gain beyond the noise (the logQ-corrected softmax already learns each item's popularity through the
# towers: the correction puts back what in-batch sampling takes out). End to end (2 runs each, load 3-8): planted
# 100k 0.104 vs 0.104, 200k 0.098 vs 0.101; MovieLens 0.068 vs 0.067 and 0.068 vs 0.068: not the default.
ITEM_BIAS: dict[str, Any] = {"retrieval": {"item_bias": {"kind": "adagrad", "lr": 0.2}}}

# The user id's rows on Adam without momentum (beta1 0, beta2 0.99): an RMSprop-like Adagrad whose accumulator decays
# (a ~100-update memory), so a drifting user's steps do not shrink. In-process (tools/exp/inproc.py, lr 0.007): planted
# seeds 0-2 0.1062, 0.1043, 0.1053 against the default's 0.1006, 0.0975, 0.0949 (lr 0.003: 0.1025); MovieLens seeds 0-3
# 0.0699, 0.0660, 0.0686, 0.0741 against 0.0688, 0.0677, 0.0688, 0.0634. End to end (2026-11-24, 2 runs per arm and
# round, load 3-8): planted 200k 0.103 (0.101-0.105) vs 0.097 (0.096-0.097) and 0.106 (0.104-0.108) vs 0.098
# (0.098-0.099), 0.50-0.51 of the oracle's 0.206; MovieLens 0.067 (0.066-0.068) vs 0.068 (0.067-0.069) and 0.067
# (0.066-0.068) vs 0.068 (0.068-0.068): lower in each of the 4 paired runs by 0-0.002 (its 21 seen users 0.013-0.021
# against 0.019-0.025); a third MovieLens round, 3 runs each: 0.066 (0.065-0.067) vs 0.066 (0.065-0.068). Over its 7
# runs MovieLens 0.0665 against 0.0672, within the end-to-end noise; planted higher in each of 4 paired runs: the
# default arm's (and examples/two_tower.yaml's) user id since; arm user-adagrad is the arm it replaced. (A model
# config names no user id slot: one that leaves the slot's optimizer out still gets the shared Adagrad.) Confirming
# run, default vs user-adagrad: planted 0.103 (0.103-0.103) vs 0.100 (0.099-0.102), MovieLens 0.067 vs 0.065; over
# 9 MovieLens runs each 0.0668 vs 0.0668.
USER_ID_RMS: dict[str, Any] = DRIFTING_USER_ID_OPTIMIZER
# Arm user-rms+history, the same with the user history attention-pooled, one quiet round (2026-11-24, 3 runs per
# arm, load 0.1-2.3): planted 200k 0.108 (0.107-0.110; 0.52 of the oracle's 0.206 in each run) against the
# default's 0.103 (0.100-0.105); MovieLens 0.066 (0.065-0.067) against 0.067 (0.065-0.068), its 21 seen users 0.011
# against 0.017, as user-adam+history before. A second round (2 runs per arm): planted 0.106 (0.106-0.106) vs 0.103
# (0.101-0.105), MovieLens 0.065 vs 0.066, seen users 0.004 vs 0.016: planted up, MovieLens's seen users down:
# not the default.

# Eighth session (2026-11-24, bench/retrieval.py's paired output, arms' runs interleaved, load 1.7-14): why the
# history seemed to hurt MovieLens's seen users. Its 60 new holdout users get service.cold_start's list whatever the
# arm (their recall 0.084-0.086 in every run), so only the 21 seen users differ, and their mean recall@10 weighs a
# hit by 1/|relevant|: over 6 paired runs default and user-rms+history made 38 and 37 hits on them, but the
# default's included 10 (of 6 runs x 6 relevant) on user 257 (1/6 each) and the history's 13 on user 652 (229
# relevant, 1/229 each): seen recall 0.017 vs 0.008 from one user. Paired (run r vs run r, per-user differences,
# 95% bootstrap interval over users): MovieLens user-rms+history -0.0015 [-0.0085, +0.0039], seen -0.0094 [-0.0285,
# +0.0014] (6 pairs); planted -0.0002 [-0.0046, +0.0046] (4 pairs, 0.100-0.107 against 0.099-0.104: its quiet
# rounds' 0.106-0.108 did not hold under load). In-process (/work/tools/exp/inproc.py) the history cost MovieLens's
# new users 0.065-0.071 against 0.084-0.087, as their towers' vector (an empty history, rare in training) is all
# they get there; history dropout 0.3-0.5 won back half of that; end to end cold_start serves them, so it is moot.
# The last 20 positives attention-pooled (user-rms+history20), 4 rounds of 2 paired runs: planted 0.1081, 0.1035,
# 0.1094, 0.1048, 0.1019, 0.1077, 0.1031, 0.1052 (mean 0.1055) against the default's 0.1026, 0.1032, 0.1010, 0.0987,
# 0.1038, 0.1019, 0.1024, 0.0998 (0.1017): higher in 7 of 8 runs, +0.0038 [-0.0004, +0.0078]; at least half the
# oracle in 7 of 8 runs (0.494-0.531), >= 0.105 in 4. MovieLens -0.0005 [-0.0074, +0.0051], its seen users -0.0080
# [-0.0270, +0.0033] (8 pairs; lower in each round, the last round's interval below zero: -0.0114 [-0.0278,
# -0.0010]). Not the default: planted not >= 0.105 in each run, its gain's interval not clear of zero, and the
# seen users' sign steady. A fifth, quiet round (load 0.9-2.7): default 0.1071, 0.1039 (0.52, 0.50 of the oracle),
# user-rms+history20 0.1068, 0.1043 (+0.0001), the last 10 0.1028, 0.1042: the history's planted gain is the loaded
# runs' (the default's planted recall falls with the load, 0.099-0.104 at load 3-8); over 10 pairs +0.0031 [-0.0008,
# +0.0069], higher in 8. The last 10: planted 0.104-0.108 (+0.0061 [+0.0008, +0.0117], 2 pairs), MovieLens
# -0.0021 [-0.0066, +0.0005]; the 50 mean-pooled: planted +0.0009, MovieLens -0.0016 (2 pairs each).

# Tenth session (2026-11-25, quiet, bench/RESULTS.md): on MovieLens 100K (the log #11's user replayed, with user
# attributes) the last 20 positives attention-pooled gave 0.130 (0.125-0.137) against 0.105 (0.095-0.111) without,
# -0.0248 [-0.0484, -0.0027] over 3 pairs for no-history, from the new users; planted 0.104 against 0.100,
# ml-latest-small 0.067 against 0.068: the default arm since (and examples/two_tower_ratings.yaml). Arm
# frequency-0.01 is the logQ estimate's rate before models.model_config.RetrievalConfig.frequency_alpha became 0.1.

# Eleventh session (2026-11-25, quiet): frequency_alpha became per occurrence in the whole stream (each of W trainers
# averages at 1 - (1 - alpha)^W, models.item_frequency.reader_alpha); before, each of the 2 trainers averaged its own
# half at alpha, i.e. twice the stretch of the stream. Measured as main's frequency-0.2 (2 trainers: 0.2 each, the
# new rule's 0.19) against its default: MovieLens 100K +0.0050 [-0.0043, +0.0152], seen users +0.0137 [-0.0041,
# +0.0329] (3 pairs); planted -0.0010 [-0.0065, +0.0044], ml-latest-small -0.0002 (2 pairs each). In-process (two
# workers over one store, seeds 0-2) MovieLens 100K 0.155 / 0.156 / 0.137 against 0.149 / 0.147 / 0.124. The arms
# frequency-0.01 and frequency-0.2 name the whole stream's rate since.
# Then one estimate for the job in the PS (RetrievalConfig.shared_frequency, trainer.shared_frequency), as arms
# against the default of then (each trainer's own): with dense_update ps as well, MovieLens 100K +0.0111
# [-0.0058, +0.0311] (2 pairs), -0.0025 [-0.0111, +0.0056] (3), +0.0031 [-0.0101, +0.0168] (4); planted +0.0040
# [-0.0024, +0.0103], -0.0026 [-0.0081, +0.0030] (2 each); ml-latest-small +0.0015 [-0.0023, +0.0071] (2); the shared
# estimate alone +0.0004, dense ps alone -0.0037 (2 pairs each, MovieLens 100K). The shared estimate became the
# model's default (neutral or better everywhere, the paper's design); dense_update ps stays an arm.

DEFAULT_ARM = Arm("default", {}, True, "train.model as the model's defaults give it, the user id's rows on "
                  "RMSprop-like steps (Adam beta1 0, beta2 0.99, lr 0.007), the user's last 20 positives "
                  "attention-pooled (schema.history)", history_length=DEFAULT_HISTORY_LENGTH, pooling="attention",
                  user_id_optimizer=USER_ID_RMS)

ARMS: tuple[Arm, ...] = (
    DEFAULT_ARM,
    replace(DEFAULT_ARM, name="frequency-0.01", model={"retrieval": {"frequency_alpha": 0.01}},
            what="the default with the logQ correction's item-frequency estimate averaging ~100 gaps per item (the "
                 "paper's alpha; the default until 2026-11-25)"),
    replace(DEFAULT_ARM, name="frequency-0.2", model={"retrieval": {"frequency_alpha": 0.2}},
            what="the default with ~5 gaps per item"),
    replace(DEFAULT_ARM, name="one-trainer", what="the default with one trainer reading one partition",
            job={"up": {"workers": 1}, "kafka": {"partitions": 1}}),
    replace(DEFAULT_ARM, name="own-frequency", model={"retrieval": {"shared_frequency": False}},
            what="the default with an item-frequency estimate per trainer (each at reader_alpha), not the PS's one"),
    replace(DEFAULT_ARM, name="dense-ps", job={"train": {"dense_update": "ps"}},
            what="the default with the dense weights' optimizer on the PS (dense_update: ps; with the shared estimate, "
                 "the pair measured above)"),
    Arm("no-history", {}, False, "the default without the user history (the default arm until 2026-11-25)",
        user_id_optimizer=USER_ID_RMS),
    Arm("pointwise", _loss("pointwise"), False, "logistic loss on the rated pairs"),
    Arm("softmax", _loss("softmax", logq=False), False, "softmax over in-batch negatives, no logQ correction"),
    Arm("softmax+logQ", _loss("softmax", logq=True), False, "softmax with the logQ correction"),
    Arm("pointwise+history", _loss("pointwise"), True, "pointwise, user history pooled in the user tower"),
    Arm("softmax+logQ+history", _loss("softmax", logq=True), True, "softmax with logQ, user history"),
    Arm("sparse-adam", {"sparse_optimizer": {"kind": "adam", "lr": 0.01}}, False,
        "the default with Adam (lr 0.01) on the embeddings instead of row-wise Adagrad (drift: steps do not decay)"),
    Arm("history-attention", {}, True, "the default, user history attention-pooled (learned query, position "
        "biases)", pooling="attention"),
    Arm("history-last5", {}, True, "the default, the user's last 5 positives mean-pooled", history_length=5),
    Arm("user-adam", {}, False, "the default, the user id's rows on Adam (lr 0.007), the others on Adagrad",
        user_id_optimizer=USER_ID_ADAM),
    Arm("user-adam+history", {}, True, "user-adam and the user history attention-pooled", pooling="attention",
        user_id_optimizer=USER_ID_ADAM),
    Arm("user-rms+history", {}, True, "the default (user id on RMSprop-like steps) and the user history "
        "attention-pooled", pooling="attention", user_id_optimizer=USER_ID_RMS),
    Arm("user-rms+history10", {}, True, "user-rms+history with the last 10 positives only",
        history_length=10, pooling="attention", user_id_optimizer=USER_ID_RMS),
    Arm("user-rms+history-mean", {}, True, "the default (user id on RMSprop-like steps) and the user history "
        "mean-pooled", user_id_optimizer=USER_ID_RMS),
    Arm("item-bias", ITEM_BIAS, False, "the default with a learned item bias in the softmax's logit (Adagrad lr 0.2), "
        "served as one more index column"),
    Arm("user-adagrad", {}, False, "train.model as the model's defaults give it, the user id's rows on the shared "
        "row-wise Adagrad too (the default arm until user-rms won planted and tied MovieLens)"),
    # End to end (2026-11-25, 3 pairs each, quiet): dim16 planted -0.0041 [-0.0105, +0.0018], ML-100K +0.0039
    # [-0.0053, +0.0131]; dim64 planted -0.0002 [-0.0058, +0.0053]. The dims are not what one pass lacks
    # against the batch fit (bench/temporal_mf.py: its epochs and its users' time trend are).
    replace(DEFAULT_ARM, name="dim16", model={"embedding_dim": 16, "tower_dim": 32},
            what="the default over 16-dim embeddings into 32-dim vectors (the batch softmax MF's best dim: "
                 "bench/temporal_mf.py)"),
    # End to end (2026-11-25, quiet): ML-100K +0.0001 [-0.0116, +0.0114] (4 pairs; seen users +0.0033), planted
    # -0.0001 [-0.0066, +0.0065] (2 pairs): the history's cost to ML-100K's seen users is not the shared rows.
    replace(DEFAULT_ARM, name="history-own-rows", history_embeddings="own",
            what="the default, the history's ids on rows of their own (schema.history.embeddings: own), not the "
                 "item tower's"),
    # End to end (2026-11-25, quiet, 3 pairs each): planted -0.0047 [-0.0097, +0.0001], ML-100K -0.0045 [-0.0152,
    # +0.0072]: faster steps follow no better.
    replace(DEFAULT_ARM, name="user-rms-0.015", user_id_optimizer={**USER_ID_RMS, "lr": 0.015},
            what="the default, the user id's RMSprop-like steps at lr 0.015 (0.007): a drifting user followed faster"),
    # Thirteenth session (2026-11-25, quiet, paired; bench/RESULTS.md): label-0 records in the softmax gain on planted
    # (0.5: +0.0073 over 2 pairs) and lose on MovieLens 100K (0.5: -0.0257, 0.25: -0.0101); the history of every
    # record likewise (+0.0031 / -0.0143); batch 128 / 512, history 50 and the user id's lr 0.0035 / 0.002 within
    # the noise. no-user-id (attributes and history alone) planted -0.0079, MovieLens 100K -0.0139 (2 pairs each).
    # dense-average 0.98 / 0.995 planted -0.0003 / -0.0019; both-0.3 / both-1 planted -0.0007 / +0.0005, MovieLens
    # 100K +0.0035 / -0.0193 (2 pairs each).
    *(replace(DEFAULT_ARM, name=f"label0-{w:g}", model=_label0(w),
              what=f"the default, the softmax learning from the label-0 records too (rated, not liked) at weight "
                   f"{w:g}, not from the positives alone") for w in (1.0, 0.5, 0.25)),
    replace(DEFAULT_ARM, name="history-every-record", job=EVERY_RECORD_HISTORY,
            what="the default, the history holding the user's last 20 records of any label (schema.history."
                 "positive_above: -1), not the positives alone"),
    replace(DEFAULT_ARM, name="label0-0.5+hist-every", model=_label0(0.5), job=EVERY_RECORD_HISTORY,
            what="label0-0.5 and the history of every record"),
    *(replace(DEFAULT_ARM, name=f"batch-{n}", job={"train": {"batch_size": n}},
              what=f"the default at {n} records per step (256): more steps over one pass with fewer in-batch "
                   "negatives, or fewer with more") for n in (128, 512)),
    # End to end (2026-11-25, quiet): steps-2 planted -0.0072 and -0.0135, ML-100K +0.0115 and +0.0101; steps-3
    # planted -0.0278; with repeats reusing their logQ, steps-2 planted -0.0043, ML-100K -0.0190 (bench/RESULTS.md,
    # fourteenth session).
    *(replace(DEFAULT_ARM, name=f"steps-{n}", job={"train": {"steps_per_batch": n}},
              what=f"the default with {n} updates per mini-batch (1): each record learnt from {n} times, "
                   "as a batch fit rereads its data") for n in (2, 3)),
    replace(DEFAULT_ARM, name="history-50", history_length=50,
            what="the default with the user's last 50 positives attention-pooled (20)"),
    replace(DEFAULT_ARM, name="no-user-id", without_slots=("user_id",),
            what="the default without the user id's rows in the user tower: attributes and history alone"),
    *(replace(DEFAULT_ARM, name=f"user-rms-{lr:g}", user_id_optimizer={**USER_ID_RMS, "lr": lr},
              what=f"the default, the user id's RMSprop-like steps at lr {lr:g} (0.007): a longer memory per user")
      for lr in (0.0035, 0.002)),
    *(replace(DEFAULT_ARM, name=f"dense-average-{decay:g}", model={"dense_average": {"decay": decay}},
              what=f"the default, its towers' dense weights served as their moving average over "
                   f"~{round(1 / (1 - decay)):d} steps") for decay in (0.98, 0.995)),
    *(replace(DEFAULT_ARM, name=f"both-{w:g}", model={"retrieval": {"loss": "both", "pointwise_weight": w}},
              what=f"the default, the towers also trained by the click loss on every record at weight {w:g} (a "
                   "label-0 record pushes its pair apart)") for w in (0.3, 1.0)),
    # End to end (2026-11-25, quiet, 1 pair each): planted -0.0170 [-0.0258, -0.0087], ML-100K -0.0007.
    replace(DEFAULT_ARM, name="mlp-128", model={"mlp": [128]},
            what="the default with a 128-unit ReLU layer in each tower (linear towers): attributes, history and "
                 "the id combined non-linearly"),
)
ARM_NAMES = tuple(a.name for a in ARMS)


def base_config(log: Interactions, *, seed: int = 0) -> dict[str, Any]:
    """The streamrec YAML (as a mapping) for replaying ``log``'s records through `up`."""
    slots: list[dict[str, Any]] = [{"name": "user_id", "kind": "sparse", "hash": "int"},
                                   {"name": "item_id", "kind": "sparse", "hash": "int"}]
    slots += [{"name": f, "kind": "sparse", "hash": "fnv1a"} for f in (*log.user_fields, *log.item_fields)]
    lists = {f for f in log.item_fields if any(isinstance(a.get(f), list) for a in log.item_attrs.values())}
    model_slots = [{"name": "user_id", "tower": "user"}, *({"name": f, "tower": "user"} for f in log.user_fields),
                   {"name": "item_id", "tower": "item"},
                   *({"name": f, "tower": "item", **({"pooling": "mean"} if f in lists else {})}
                     for f in log.item_fields)]
    return {
        "kafka": {"partitions": 2},
        "schema": {"format": "json", "label": "label", "event_time": "timestamp", "user_id": "user_id",
                   "item_id": "item_id", "slots": slots},
        # sizes and optimizers left out: two_tower's defaults (models.model_config.TWO_TOWER_DEFAULTS)
        "train": {"model": {"type": "two_tower", "n_dense": 0, "seed": seed, "slots": model_slots}},
        "up": {"shards": 2, "workers": 2, "commit_on_exit": False},
    }


def arm_config(base: dict[str, Any], arm: Arm) -> tuple[dict[str, Any] | None, str]:
    """(the arm's config, "") when the config schema accepts it, else (None, why not)."""
    config = copy.deepcopy(base)
    model = config["train"]["model"]
    _merge(model, copy.deepcopy(arm.model))
    if arm.user_id_optimizer is not None:
        for slot in model["slots"]:
            if slot["name"] == "user_id":
                slot["optimizer"] = dict(arm.user_id_optimizer)
    if arm.history:
        config["schema"]["history"] = {"slot": "history", "length": arm.history_length}
        if arm.history_embeddings != "item":  # the schema's default left out, as a user's config would
            config["schema"]["history"]["embeddings"] = arm.history_embeddings
        model["slots"].append({"name": "history", "tower": "user", "pooling": arm.pooling})
    _merge(config, copy.deepcopy(arm.job))  # after the history: an arm's job may change it
    model["slots"] = [s for s in model["slots"] if s["name"] not in arm.without_slots]
    try:
        StreamrecConfig.model_validate(config)
    except ValidationError as err:
        first = err.errors()[0]
        return None, f"{'.'.join(str(p) for p in first['loc'])}: {first['msg']}"
    return config, ""


def _merge(into: dict[str, Any], overrides: dict[str, Any]) -> None:
    """Nested update: a mapping in ``overrides`` updates the mapping it meets, anything else replaces."""
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value
