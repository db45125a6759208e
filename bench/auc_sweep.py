"""Test AUC of `streamrec train-files` under sparse/wide optimizer settings, on bench/train.py's data.

Each setting overrides the wide&deep job of bench/train.py (dim 9, MLP 400-400-400, batch
512, dense Adam 1e-3, 1 shard, 2 workers); the baseline is the same job with the defaults
(trainer/job_config.py), run first in the same process. Settings are JSON objects with any of
``slr``/``wlr`` (sparse/wide learning rate), ``sopt``/``wopt`` (more optimizer keys, e.g.
``{"initial_accumulator": 1e-5}``), ``init`` (init_scale), ``model`` (e.g. ``"lr"``),
``admission`` (the tables' admission policy, e.g. ``{"policy": "count", "min_count": 2}``: an
id gets a row from its second occurrence on), ``label`` (shown instead of the setting).

``--study``: what the peers do that streamrec does not, one change at a time against the
defaults (``STUDY``): TensorFlow's/Keras' embedding initialisation scale (0.05) and a smaller
one, Keras' Adagrad accumulator start (0.1) and a small one, one learning rate for the wide
weight and the embedding (TorchRec's rowwise Adagrad shares the row), and admission of ids
seen once (count admission, min 2). Per-slot learning rates are not in the model config.

Measured (300k train rows, 60k test rows, 2 workers, load ~9 on the 2-core machine; test AUC,
defaults 0.7045): init 0.05 +0.0004, init 0.001 +0.0001, accumulator start 0.1 -0.0289, 1e-4
-0.0069, one lr 0.05 -0.0028, one lr 0.02 -0.0001, count admission min 2 -0.0010. None of the
peers' choices helps beyond noise.

TensorFlow's per-element Adagrad accumulator (``sopt: {"accumulator": "element"}``; streamrec's
tables and TorchRec's fused kernel keep one per row), 2026-11-24, 1M train rows, 2 workers, load
7-10, two runs: defaults 0.7111 / 0.7116; element-wise lr 0.05 0.7114, lr 0.02 0.7119, lr 0.01
0.7119 / 0.7117, lr 0.005 0.7118; row-wise lr 0.01 0.7118. Within the defaults' own run-to-run
spread (0.0005): the accumulator does not explain the gap to TensorFlow (0.7125-0.7126 on the same
data in bench/train.py), so the default stays row-wise (1 state float per row, not dim).
All of TensorFlow's sparse choices at once (the last STUDY entry): 0.7124 against the defaults'
0.7110 in one run; 0.7121 with our init 0.01; init 0.05 + element-wise lr 0.02 with our wide
weights' optimizer 0.7111: the wide weights' lr 0.02 and accumulator start 1e-7 matter most.

Run: ``python bench/auc_sweep.py '[{"wlr": 0.05}, {"slr": 0.02, "wlr": 0.02}]' [--json]`` or
``python bench/auc_sweep.py --study --train-rows 300000``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.auc_ceiling import make_planted
from models.model_config import ModelConfig
from tables.table_config import TableConfig
from trainer.file_job import FileJob, criteo_model, run_file_job

STUDY = [
    {"label": "init uniform 0.05 (Keras/TF)", "init": 0.05},
    {"label": "init uniform 0.001", "init": 0.001},
    {"label": "Adagrad accumulator starts at 0.1 (Keras)", "sopt": {"initial_accumulator": 0.1},
     "wopt": {"initial_accumulator": 0.1}},
    {"label": "Adagrad accumulator starts at 1e-4", "sopt": {"initial_accumulator": 1e-4},
     "wopt": {"initial_accumulator": 1e-4}},
    {"label": "one lr for wide and embedding (0.05)", "wlr": 0.05},
    {"label": "one lr for wide and embedding (0.02)", "slr": 0.02, "wlr": 0.02},
    {"label": "ids seen once get no row (count admission, min 2)", "admission": {"policy": "count", "min_count": 2}},
    {"label": "element-wise Adagrad accumulator (TF), lr 0.05", "sopt": {"accumulator": "element"}},
    {"label": "element-wise Adagrad accumulator (TF), lr 0.02", "slr": 0.02, "sopt": {"accumulator": "element"}},
    {"label": "element-wise Adagrad accumulator (TF), lr 0.01", "slr": 0.01, "sopt": {"accumulator": "element"}},
    {"label": "all of TF's sparse choices (element-wise, lr 0.02 both, accumulators 1e-7, eps 1e-7, init 0.05)",
     "slr": 0.02, "wlr": 0.02, "init": 0.05,
     "sopt": {"accumulator": "element", "initial_accumulator": 1e-7, "eps": 1e-7},
     "wopt": {"initial_accumulator": 1e-7, "eps": 1e-7}},
]


def model_for(setting: dict) -> ModelConfig:
    base = criteo_model(setting.get("model", "wide_deep"), embedding_dim=9, mlp=(400, 400, 400), optimizer="adam",
                        lr=1e-3)
    update: dict = {}
    if "slr" in setting or "sopt" in setting:
        update["sparse_optimizer"] = base.sparse_optimizer.model_copy(
            update={"lr": setting.get("slr", base.sparse_optimizer.lr), **setting.get("sopt", {})})
    if "wlr" in setting or "wopt" in setting:
        update["wide_optimizer"] = base.wide_optimizer.model_copy(
            update={"lr": setting.get("wlr", base.wide_optimizer.lr), **setting.get("wopt", {})})
    if "init" in setting:
        update["init_scale"] = setting["init"]
    return ModelConfig.model_validate({**base.model_dump(), **update})


def tables_for(setting: dict, model: ModelConfig) -> tuple[TableConfig, ...] | None:
    """The shards' tables when the setting changes them (admission), else None (the model's)."""
    if "admission" not in setting:
        return None
    return tuple(TableConfig.model_validate({**t.model_dump(), "admission": setting["admission"]})
                 for t in model.table_configs())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("settings", nargs="?", default="[]",
                    help="JSON list of settings (the defaults run first as the baseline)")
    ap.add_argument("--study", action="store_true", help="run the STUDY settings (after any given)")
    ap.add_argument("--train-rows", type=int, default=1_000_000)
    ap.add_argument("--test-rows", type=int, default=200_000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    settings = [{}, *json.loads(args.settings), *(STUDY if args.study else [])]
    runs = []
    with tempfile.TemporaryDirectory(prefix="streamrec-auc-sweep-") as tmp:
        data = make_planted(Path(tmp), args.train_rows, args.test_rows, seed=0)
        for setting in settings:
            model = model_for(setting)
            job = FileJob(train=(str(data.train),), test=str(data.test), model=model, batch_size=512,
                          servers=1, workers=args.workers, tables=tables_for(setting, model))
            with open("/dev/null", "w") as quiet:
                r = run_file_job(job, log=quiet)
            runs.append({"setting": setting.get("label", setting) or "defaults", "test_auc": round(r["test_auc"], 4),
                         "test_logloss": round(r["test_logloss"], 4), "samples_per_s": r["samples_per_s"]})
    base = runs[0]["test_auc"]
    for r in runs:
        r["auc_diff_to_defaults"] = round(r["test_auc"] - base, 4)
    out = {"bayes_auc": round(data.bayes_auc, 4), "seen_id_ceiling_auc": round(data.seen_id_ceiling_auc, 4),
           "runs": runs}
    if args.json:
        print(json.dumps(out))
        return 0
    print(f"Bayes AUC {out['bayes_auc']:.4f}, seen-id ceiling {out['seen_id_ceiling_auc']:.4f}")
    for r in runs:
        print(f"{json.dumps(r['setting']):<70} test AUC {r['test_auc']:.4f} ({r['auc_diff_to_defaults']:+.4f} "
              f"vs defaults), logloss {r['test_logloss']:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
