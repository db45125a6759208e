"""Overlap benchmark: the prefetch stage (next batches' parsing, features and async pull) in a
thread against a child process, on the `streamrec train-files` job of bench/train.py.

Job: wide&deep dim 9, MLP 400-400-400, batch 512, Adam 1e-3, 1 shard, 2 workers, planted
Criteo rows from logrecords.generator (seed 0). Both variants run in the same invocation,
interleaved (thread, process, process, thread, ...) so drifting machine load hits both alike;
each figure is the median over --repeats runs. The load average before and after is printed:
on a shared machine the absolute figures move, the ratio is the result.

Run: ``python bench/overlap.py [--train-rows N] [--repeats R] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

KINDS = ("thread", "process")
JOB = {"dim": 9, "mlp": (400, 400, 400), "batch_size": 512, "lr": 1e-3, "servers": 1, "workers": 2}  # the issue's


def run(kind: str, train: Path, test: Path) -> dict:
    from launcher.file_job import FileJob, criteo_model, run_file_job

    model = criteo_model("wide_deep", embedding_dim=JOB["dim"], mlp=JOB["mlp"], optimizer="adam", lr=JOB["lr"])
    job = FileJob(train=(str(train),), test=str(test), model=model, batch_size=JOB["batch_size"],
                  servers=JOB["servers"], workers=JOB["workers"], prefetch=kind)  # type: ignore[arg-type]
    with open(os.devnull, "w") as quiet:
        r = run_file_job(job, log=quiet)
    workers = r["workers"]
    # a worker's wait for the prefetch stage: its wall time minus the phases of its steps
    wait = [w["seconds"] - sum(w["phases"].values()) for w in workers]
    return {"samples_per_s": r["samples_per_s"], "test_auc": r["test_auc"], "train_seconds": r["train_seconds"],
            "worker_wait_s": [round(x, 2) for x in wait], "worker_cpu_s": [round(w["cpu_s"], 2) for w in workers],
            "shard_cpu_s": r["shard_cpu_s"], "peak_rss_mb": r["peak_rss_mb"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--train-rows", type=int, default=400_000)
    ap.add_argument("--test-rows", type=int, default=50_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    from logrecords.generator import PlantedModel
    from logrecords.sample_encoding import write_dataset

    load_before = os.getloadavg()
    runs: dict[str, list[dict]] = {k: [] for k in KINDS}
    with tempfile.TemporaryDirectory(prefix="streamrec-bench-overlap-") as tmp:
        train, test = Path(tmp) / "train.txt", Path(tmp) / "test.txt"
        model = PlantedModel(seed=args.seed)  # the planted data of bench/train.py (test rows: the later events)
        write_dataset(str(train), model, args.train_rows, fmt="criteo")
        write_dataset(str(test), model, args.test_rows, fmt="criteo")
        for i in range(args.repeats):
            for kind in KINDS if i % 2 == 0 else KINDS[::-1]:
                runs[kind].append(run(kind, train, test))
                if not args.json:
                    r = runs[kind][-1]
                    print(f"  run {i + 1} {kind:<8} {r['samples_per_s']:>10,.0f} samples/s  AUC {r['test_auc']:.4f}  "
                          f"worker wait {r['worker_wait_s']} s  load {os.getloadavg()[0]:.1f}", flush=True)
    load_after = os.getloadavg()
    med = {k: statistics.median(r["samples_per_s"] for r in runs[k]) for k in KINDS}
    auc = {k: statistics.median(r["test_auc"] for r in runs[k]) for k in KINDS}
    faster = max(KINDS, key=lambda k: med[k])
    out = {"samples_per_s": med, "test_auc": {k: round(v, 4) for k, v in auc.items()},
           "ratio_process_to_thread": round(med["process"] / med["thread"], 3), "faster": faster,
           "load_avg_1m": {"before": round(load_before[0], 2), "after": round(load_after[0], 2)},
           "cpus": os.cpu_count(), "runs": runs,
           "setup": {"train_rows": args.train_rows, "test_rows": args.test_rows, "repeats": args.repeats, **JOB}}
    if args.json:
        print(json.dumps(out))
        return 0
    print(f"train-files wide&deep dim {JOB['dim']}, MLP {JOB['mlp']}, batch {JOB['batch_size']}, Adam {JOB['lr']}, "
          f"{JOB['servers']} shard / {JOB['workers']} workers, {args.train_rows:,} rows, median of {args.repeats} "
          f"interleaved runs; load avg {load_before[0]:.1f} -> {load_after[0]:.1f} on {os.cpu_count()} CPUs")
    for k in KINDS:
        print(f"  prefetch {k:<8} {med[k]:>10,.0f} samples/s  test AUC {auc[k]:.4f}")
    print(f"  process / thread: {out['ratio_process_to_thread']:.3f}x  (faster: {faster})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
