"""Test AUC of `streamrec train-files` under model settings, over several seeds, beside TensorFlow.

Each setting overrides the wide&deep job of bench/train.py (dim 9, MLP 400-400-400, batch 512,
dense Adam 1e-3, 1 shard, 2 workers, bench/auc_ceiling.py's planted data); the baseline is the
same job with the model defaults (models/model_config.py). Every setting runs once per seed
(``--seeds``: the model's seed, i.e. its MLP and embedding initialisation; the data stay the
same), seed by seed in the same process, so the machine's load falls on all settings alike.
``--tf``: TensorFlow's single-process baseline (bench/baselines/tf_wide_deep.py, same files, same
seeds; ``.venv-baselines``) runs in the same loop. The table gives each setting's mean test AUC
+- its spread (half the range over seeds) and the paired difference to the defaults (seed by
seed) and to TensorFlow: differences of ~0.0005 are within the seed noise.

Settings are JSON objects with any of ``slr``/``wlr`` (sparse/wide learning rate),
``sopt``/``wopt``/``dopt`` (more sparse/wide/dense optimizer keys, e.g.
``{"initial_accumulator": 1e-5}``; ``dopt`` replaces the bench's dense Adam 1e-3 keys it names),
``init`` (init_scale), ``merge`` (the model's ``dense_merge``: ``"sum"``/``"mean"``), ``model``
(e.g. ``"lr"``), ``admission`` (the tables' admission policy, e.g. ``{"policy": "count", "min_count": 2}``),
``bias`` (the model's ``output_bias``: a log-odds, or ``"prior"``: the train file's click rate's),
``avg`` (the model's ``dense_average`` decay, or null: off), ``sched`` (the model's ``dense_schedule``;
``"decay_steps": "pass"``: a worker's steps in the pass after the warm-up), ``workers`` (instead of ``--workers``),
``sync`` (the job's ``dense_sync_steps`` instead of bench/train.py's 64), ``dense_update``
(``"local"``/``"ps"``), ``label`` (shown instead of the setting).

``--study``: what the peers do that streamrec does not, one change at a time against the defaults
(``STUDY``; since #16 the defaults take TensorFlow's sparse rates and starts, row-wise), the previous
defaults, and deepfm under both. Per-slot learning rates are not in the model config and no peer
uses them (TensorFlow and TorchRec run one rate per table), and the MLP's Glorot-uniform weights and
zero biases are already the peers', so neither is swept. Findings: bench/RESULTS.md.

``--dense``: how the 2 workers combine the dense model (``DENSE_STUDY``: merge rule, merge interval,
``dense_update: ps``, 1 worker).

``--average``: the dense weights' moving average for evaluation and export (``AVERAGE_STUDY``: decays).
``--schedule``: the dense lr over the pass (``SCHEDULE_STUDY``: linear decay, warm-up, inverse sqrt).

``--one-pass``: what is left to gain once the workers average (``ONE_PASS_STUDY``: the dense rate, betas
and merge interval for 2 workers, the output bias's start, the sparse rates, init scales and Adagrad
accumulator starts around the defaults).

Run: ``python bench/auc_sweep.py '[{"wlr": 0.05}]' --seeds 3 --tf [--json]``, or with ``--study``, ``--dense``
``--one-pass``, ``--average`` or ``--schedule``.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.auc_ceiling import make_planted
from launcher.file_job import FileJob, criteo_model, run_file_job
from models.model_config import ModelConfig
from tables.table_config import TableConfig
from trainer.job_config import DenseUpdate

ROOT = Path(__file__).resolve().parent.parent
TF_SCRIPT = ROOT / "bench" / "baselines" / "tf_wide_deep.py"
# streamrec's wide_deep defaults before #16 (row-wise Adagrad from 0; embeddings lr 0.05, wide 0.01, init 0.01)
OLD_DEFAULTS = {"slr": 0.05, "wlr": 0.01, "init": 0.01, "sopt": {"initial_accumulator": 0.0, "eps": 1e-8},
                "wopt": {"initial_accumulator": 0.0, "eps": 1e-8}}

# One change at a time against the defaults (since #16 TensorFlow's sparse rates and starts, row-wise).
STUDY = [
    {**OLD_DEFAULTS, "label": "previous defaults (lr 0.05 / wide 0.01, accumulators from 0, init 0.01)"},
    {"label": "element-wise Adagrad accumulator (TensorFlow's exact sparse rule)", "sopt": {"accumulator": "element"}},
    {"label": "dense Adam eps 1e-7 (TensorFlow's)", "dopt": {"eps": 1e-7}},
    {"label": "sparse/wide l2 1e-4 (frequency-aware: added at every touch)", "sopt": {"l2": 1e-4},
     "wopt": {"l2": 1e-4}},
    {"label": "count admission min 2 (ids seen once get no row)", "admission": {"policy": "count", "min_count": 2}},
    {"label": "embeddings lr 0.03", "slr": 0.03},
    {"label": "wide lr 0.03", "wlr": 0.03},
    {"label": "dense Adam lr 2e-3", "dopt": {"lr": 2e-3}},
    {"label": "deepfm, defaults", "model": "deepfm"},
    {**OLD_DEFAULTS, "label": "deepfm, previous defaults", "model": "deepfm"},
]

# How 2 asynchronous workers combine the dense (MLP) model (the rest of the gap to 1 worker, #16);
# since #16 the default merges by mean.
DENSE_STUDY = [
    {"label": "dense_merge sum (GEO: each worker's change added whole; before #16)", "merge": "sum"},
    {"label": "dense_merge sum, merged every step", "merge": "sum", "sync": 1},
    {"label": "dense_merge sum, merged every 16 steps", "merge": "sum", "sync": 16},
    {"label": "dense_merge mean, merged every 16 steps", "sync": 16},
    {"label": "dense_update ps (the shard runs Adam), pulled every step", "dense_update": "ps", "sync": 1},
    {"label": "1 worker", "workers": 1},
]

# What is left once 2 workers average their dense changes (#16, "one-pass quality"): the dense rate and
# merge interval for 2 workers, and the peers' starts the defaults do not copy yet, one at a time.
ONE_PASS_STUDY = [
    {"label": "dense Adam lr 1.5e-3 (2 workers' averaged changes: ~sqrt(2) x)", "dopt": {"lr": 1.5e-3}},
    {"label": "dense Adam lr 2e-3", "dopt": {"lr": 2e-3}},
    {"label": "dense Adam beta2 0.99", "dopt": {"beta2": 0.99}},
    {"label": "dense merged every 32 steps", "sync": 32},
    {"label": "output bias = the train file's log-odds (not 0)", "bias": "prior"},
    {"label": "embeddings and wide lr 0.015", "slr": 0.015, "wlr": 0.015},
    {"label": "embedding init 0.05 (TensorFlow's; the default until 0.03 won here, +0.0002)", "init": 0.05},
    {"label": "embedding init 0.1", "init": 0.1},
    {"label": "embeddings' Adagrad accumulator from 1e-6", "sopt": {"initial_accumulator": 1e-6}},
    {"label": "embeddings' Adagrad accumulator from 1e-8", "sopt": {"initial_accumulator": 1e-8}},
    {"label": "embeddings' Adagrad accumulator from 1e-9", "sopt": {"initial_accumulator": 1e-9}},
    {"label": "wide weights' Adagrad accumulator from 1e-6", "wopt": {"initial_accumulator": 1e-6}},
]


# Averaged dense weights for evaluation and export (#16, "one-pass quality"; model.dense_average): the test
# set scored with an exponential moving average of the chief's MLP weights, per step, bias-corrected. Seeds 0-2
# (2026-11-24, load 4-9), paired to the raw weights: 0.98 +0.0002, 0.99 +0.0003, 0.995 +0.0003 (higher in each
# seed), 0.999 +0.0001: since then 0.995 is wide_deep's and deepfm's default.
AVERAGE_STUDY = [
    {"label": "dense_average off (the raw weights; the default before #16's averaging)", "avg": None},
    {"label": "dense_average decay 0.98 (~50 steps)", "avg": 0.98},
    {"label": "dense_average decay 0.99 (~100 steps)", "avg": 0.99},
    {"label": "dense_average decay 0.999 (~1000 steps: most of a worker's pass)", "avg": 0.999},
]

# The dense Adam's lr over the one pass (#16; model.dense_schedule): decayed linearly to 0 over a worker's
# steps, the same after a warm-up, inverse square root. Seeds 0-1 (load 7-11), paired to the raw-weight
# defaults: linear +0.0004 / +0.0003, warm-up 50 + linear +0.0005 / +0.0003, inverse sqrt +0.0003 / +0.0000,
# with dense_average 0.995 +0.0004 / +0.0004 (the average alone +0.0003 / +0.0002).
SCHEDULE_STUDY = [
    {"label": "dense lr linear decay to 0 over the pass", "sched": {"decay_steps": "pass"}},
    {"label": "dense lr linear decay to 0.1x over the pass", "sched": {"decay_steps": "pass", "end_factor": 0.1}},
    {"label": "dense lr warm-up 50 steps, then linear decay to 0",
     "sched": {"warmup_steps": 50, "decay_steps": "pass"}},
    {"label": "dense lr 1.5e-3, linear decay to 0", "dopt": {"lr": 1.5e-3}, "sched": {"decay_steps": "pass"}},
    {"label": "dense lr inverse sqrt, time scale 100 steps", "sched": {"kind": "inverse_sqrt", "decay_steps": 100}},
]


def model_for(setting: dict, seed: int, prior: float = 0.0, steps_per_worker: int = 1) -> ModelConfig:
    base = criteo_model(setting.get("model", "wide_deep"), embedding_dim=9, mlp=(400, 400, 400), optimizer="adam",
                        lr=1e-3, seed=seed)
    update: dict = {}
    if "slr" in setting or "sopt" in setting:
        update["sparse_optimizer"] = base.sparse_optimizer.model_copy(
            update={"lr": setting.get("slr", base.sparse_optimizer.lr), **setting.get("sopt", {})})
    if "wlr" in setting or "wopt" in setting:
        update["wide_optimizer"] = base.wide_optimizer.model_copy(
            update={"lr": setting.get("wlr", base.wide_optimizer.lr), **setting.get("wopt", {})})
    if "dopt" in setting:
        update["dense_optimizer"] = base.dense_optimizer.model_copy(update=setting["dopt"])
    if "init" in setting:
        update["init_scale"] = setting["init"]
    if "merge" in setting:
        update["dense_merge"] = setting["merge"]
    if "bias" in setting:
        update["output_bias"] = prior if setting["bias"] == "prior" else setting["bias"]
    if "sched" in setting:  # decay_steps "pass": a worker's steps in the pass (train rows / batch / workers)
        sched = dict(setting["sched"])
        if sched.get("decay_steps") == "pass":
            sched["decay_steps"] = max(1, steps_per_worker - sched.get("warmup_steps", 0))
        update["dense_schedule"] = sched
    if "avg" in setting:
        update["dense_average"] = None if setting["avg"] is None else {"decay": setting["avg"]}
    return ModelConfig.model_validate({**base.model_dump(), **update})


def prior_log_odds(train: Path) -> float:
    """The log-odds of the train file's click rate (its lines start with the label)."""
    with open(train, "rb") as f:
        labels = [line[:1] == b"1" for line in f]
    rate = sum(labels) / len(labels)
    return math.log(rate / (1.0 - rate))


def tables_for(setting: dict, model: ModelConfig) -> tuple[TableConfig, ...] | None:
    """The shards' tables when the setting changes them (admission), else None (the model's)."""
    if "admission" not in setting:
        return None
    return tuple(TableConfig.model_validate({**t.model_dump(), "admission": setting["admission"]})
                 for t in model.table_configs())


def run_tf(python: Path, train: Path, test: Path, seed: int) -> dict:
    """bench/baselines/tf_wide_deep.py, single process, its defaults (= this bench's model), one seed."""
    done = subprocess.run([str(python), str(TF_SCRIPT), "--train", str(train), "--test", str(test),
                           "--seed", str(seed)], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"tensorflow baseline failed ({done.returncode}):\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _mean_spread(xs: list[float]) -> tuple[float, float]:
    return statistics.fmean(xs), (max(xs) - min(xs)) / 2


def summarise(name: str, aucs: list[float], logloss: list[float], base: list[float], tf: list[float] | None) -> dict:
    mean, spread = _mean_spread(aucs)
    row = {"setting": name, "test_auc": round(mean, 5), "spread": round(spread, 5),
           "per_seed": [round(a, 5) for a in aucs], "test_logloss": round(statistics.fmean(logloss), 5)}
    d, ds = _mean_spread([a - b for a, b in zip(aucs, base, strict=True)])
    row["diff_to_defaults"], row["diff_to_defaults_spread"] = round(d, 5), round(ds, 5)
    if tf:
        d, ds = _mean_spread([a - b for a, b in zip(aucs, tf, strict=True)])
        row["diff_to_tf"], row["diff_to_tf_spread"] = round(d, 5), round(ds, 5)
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("settings", nargs="?", default="[]",
                    help="JSON list of settings (the defaults run first as the baseline)")
    ap.add_argument("--study", action="store_true", help="run the STUDY settings (after any given)")
    ap.add_argument("--dense", action="store_true", help="run the DENSE_STUDY settings (after any given)")
    ap.add_argument("--one-pass", action="store_true", help="run the ONE_PASS_STUDY settings (after any given)")
    ap.add_argument("--average", action="store_true", help="run the AVERAGE_STUDY settings (after any given)")
    ap.add_argument("--schedule", action="store_true", help="run the SCHEDULE_STUDY settings (after any given)")
    ap.add_argument("--seeds", type=int, default=3, help="model seeds 0..N-1, each setting once per seed")
    ap.add_argument("--tf", action="store_true", help="TensorFlow single-process on the same files and seeds")
    ap.add_argument("--tf-python", default=str(ROOT / ".venv-baselines" / "bin" / "python"))
    ap.add_argument("--train-rows", type=int, default=1_000_000)
    ap.add_argument("--test-rows", type=int, default=200_000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    settings = [{}, *json.loads(args.settings), *(STUDY if args.study else []), *(DENSE_STUDY if args.dense else []),
                *(ONE_PASS_STUDY if args.one_pass else []), *(AVERAGE_STUDY if args.average else []),
                *(SCHEDULE_STUDY if args.schedule else [])]
    names = [s.get("label", json.dumps(s)) if s else "defaults" for s in settings]
    aucs: dict[str, list[float]] = {n: [] for n in names}
    losses: dict[str, list[float]] = {n: [] for n in names}
    tf: list[float] = []
    tf_loss: list[float] = []
    with tempfile.TemporaryDirectory(prefix="streamrec-auc-sweep-") as tmp:
        data = make_planted(Path(tmp), args.train_rows, args.test_rows, seed=0)
        prior = prior_log_odds(data.train)
        for seed in range(args.seeds):  # seed by seed: a load change falls on every setting alike
            if args.tf:
                r = run_tf(Path(args.tf_python), data.train, data.test, seed)
                tf.append(r["test_auc"])
                tf_loss.append(r["test_logloss"])
                print(f"seed {seed} tensorflow: {r['test_auc']:.4f}", file=sys.stderr)
            for name, setting in zip(names, settings, strict=True):
                workers = setting.get("workers", args.workers)
                model = model_for(setting, seed, prior, steps_per_worker=args.train_rows // (512 * workers))
                job = FileJob(train=(str(data.train),), test=str(data.test), model=model, batch_size=512,
                              servers=1, workers=workers,
                              tables=tables_for(setting, model), dense_sync_steps=setting.get("sync", 64),
                              dense_update=DenseUpdate(setting.get("dense_update", "local")))
                with open("/dev/null", "w") as quiet:
                    r = run_file_job(job, log=quiet)
                aucs[name].append(r["test_auc"])
                losses[name].append(r["test_logloss"])
                print(f"seed {seed} {name}: {r['test_auc']:.4f}", file=sys.stderr)
    base = aucs["defaults"]
    runs = [summarise(n, aucs[n], losses[n], base, tf or None) for n in names]
    if tf:
        runs.append(summarise("TensorFlow single-process (tf_wide_deep.py)", tf, tf_loss, base, tf))
    with open("/proc/loadavg") as f:
        load = f.read().split()[:3]
    out = {"bayes_auc": round(data.bayes_auc, 4), "seen_id_ceiling_auc": round(data.seen_id_ceiling_auc, 4),
           "train_rows": args.train_rows, "seeds": args.seeds, "workers": args.workers, "loadavg_end": load,
           "runs": runs}
    if args.json:
        print(json.dumps(out))
        return 0
    print(f"Bayes AUC {out['bayes_auc']:.4f}, seen-id ceiling {out['seen_id_ceiling_auc']:.4f}; "
          f"{args.train_rows:,} train rows, seeds 0..{args.seeds - 1}, load at the end {' '.join(load)}")
    print(f"{'setting':<78} {'test AUC':>15} {'vs defaults':>16} {'vs TF':>16} logloss")
    for r in runs:
        vs_tf = f"{r['diff_to_tf']:+.4f}+-{r['diff_to_tf_spread']:.4f}" if "diff_to_tf" in r else ""
        print(f"{r['setting'][:78]:<78} {r['test_auc']:.4f}+-{r['spread']:.4f} "
              f"{r['diff_to_defaults']:+.4f}+-{r['diff_to_defaults_spread']:.4f} {vs_tf:>16} {r['test_logloss']:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
