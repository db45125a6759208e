"""Scale-out benchmark: one job, the same data and model, at 1 to 32 workers (and 1, 2, 4 shards), in one run.

Data: the Criteo-shaped planted set of bench/train.py (one PlantedModel, its long tail of ids;
--rows training rows, then --test-rows test rows). Job: `streamrec train-files` (launcher/file_job.py)
with bench/train.py's model: wide&deep, dim 9, MLP 400-400-400, batch 512, Adam 1e-3, dense_update
local, merged every --dense-sync-steps steps by each --merge rule (``model.dense_merge``: the
model's default when not given; several are compared in the same run, at 1 worker they coincide
and run once).

Per row: samples/s of the training loops; the speed-up over the 1-worker row only where the
machine has a core for every process (else CPU per sample is the figure that carries over to a
bigger machine); CPU microseconds per trained sample by role during the training loops (the
workers' training threads, their prefetch stages (parse, features, pull), the rest of the worker
processes (zmq I/O threads), the shards (/proc/<pid>/stat, worker 0's loop)) and of the whole job
(every process of `train-files` from start to exit, start-up and test pass included:
getrusage of the reaped children); per-worker RSS before the training loop and at its peak;
test AUC and its difference to the 1-worker row of the same shard count.

When to add shards: the keys a shard served (pulls and pushes, read from its tables' counters
before the test pass) per second of its CPU, and the workers one shard keeps up with when every
process has a core: the workers' CPU per sample over the shards' (a worker trains 1e6 / its us per
sample, the shards serve 1e6 / theirs). The run's fewest is the advice: a shard per that many workers.

Staleness: the updates a row took between a worker's pull of it and that worker's push (p50/p99
over the pushes of 1 in --staleness-sample keys, followed by the shards: ps.staleness; 0: off).

The dense part at K workers (each row against a 1-worker row of the same settings): --dense-update
ps; --lr-scaling (the dense lr times sqrt(K) or K); --global-batch (each worker takes batch / K
records per step: the job's batch is one worker's); --split-dense (``train-files --dense-parts K``:
each worker's MLP takes K steps per batch, the embeddings one); --dense-beta1; --variant NAME=JSON
(repeatable): rules compared in one run, each as model keys (``dense_outer``, ``dense_optimizer``...)
and the job's ``dense_parts``, ``dense_sync_steps`` and ``lr_scaling``, the first also at 1 worker.

A short warm-up job runs first, so that numba's caches hold every kernel.

Run: ``python -m bench.scale [--quick] [--workers 1,2,4,8,16,32] [--shards 1,2,4] [--merge mean,sum]
[--split-dense] [--global-batch] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

from bench import print_result
from bench.train import make_planted, run_training, variant_config, warm_up
from trainer.job_config import DEFAULT_DENSE_SYNC_STEPS
from trainer.worker import auto_dense_parts

QUICK_ROWS = 100_000


def _children_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


LR_SCALING = {"none": lambda k: 1.0, "sqrt": lambda k: k ** 0.5, "linear": lambda k: float(k)}


def _job_args(args: argparse.Namespace, shards: int, workers: int, *, sync_steps: int | None = None,
              lr_scaling: str | None = None) -> argparse.Namespace:
    """The namespace bench/train.py's run_training reads, for one job (the dense lr scaled by --lr-scaling)."""
    batch = max(1, args.batch_size // workers) if args.global_batch else args.batch_size
    return argparse.Namespace(dim=args.dim, mlp=args.mlp, batch_size=batch,
                              lr=args.lr * LR_SCALING[lr_scaling or args.lr_scaling](workers), servers=shards,
                              workers=workers, dense_sync_steps=sync_steps or args.dense_sync_steps, ps_pull_steps=1,
                              warmup_rows=args.warmup_rows, dense_update=args.dense_update)


def parse_variant(spec: str) -> tuple[str, dict]:
    """``NAME=JSON``: a row label and the model keys it sets; the job's keys: ``dense_parts`` (an int or
    ``K/n``), ``dense_sync_steps``, ``lr_scaling`` (in place of the flags')."""
    name, sep, body = spec.partition("=")
    if not sep or not name:
        raise SystemExit(f"--variant {spec!r}: expected NAME=JSON, e.g. 'outer2={{\"dense_outer\": {{\"lr\": 2}}}}'")
    try:
        update = json.loads(body)
    except json.JSONDecodeError as e:
        raise SystemExit(f"--variant {name}: its JSON does not parse: {e}") from None
    if not isinstance(update, dict):
        raise SystemExit(f"--variant {name}: expected a JSON object of model keys, got {body!r}")
    return name, update


def dense_parts(spec: int | str, workers: int) -> int:
    """A variant's ``dense_parts`` at ``workers``: an int, ``K`` (the workers), ``K/n`` or ``auto``
    (the job's default, :func:`trainer.worker.auto_dense_parts`)."""
    if isinstance(spec, int):
        return spec
    if spec == "auto":
        return auto_dense_parts(workers)
    if spec == "K":
        return workers
    if spec.startswith("K/") and spec[2:].isdigit():
        return max(1, workers // int(spec[2:]))
    raise SystemExit(f"dense_parts {spec!r}: expected an int, K, K/n or auto")


def one_job(args: argparse.Namespace, data, work: Path, shards: int, workers: int,
            variant: tuple[str, dict]) -> dict:
    """One `train-files` job and its figures per trained sample."""
    label, keys = variant
    keys = dict(keys)
    job = _job_args(args, shards, workers, sync_steps=keys.pop("dense_sync_steps", None),
                    lr_scaling=keys.pop("lr_scaling", None))
    parts = dense_parts(keys.pop("dense_parts", "K" if args.split_dense else "auto"), workers)
    update = keys | ({} if args.dense_beta1 is None else {"dense_optimizer": {"beta1": args.dense_beta1}})
    config = variant_config(job, update, work) if update else None
    cpu0, t0 = _children_cpu_s(), time.perf_counter()
    res = run_training(job, data.train, data.test, work, args.dense_update, config=config,
                       extra=("--staleness-sample", str(args.staleness_sample), "--dense-parts", str(parts)))
    wall, job_cpu = time.perf_counter() - t0, _children_cpu_s() - cpu0
    full = json.loads((work / "job" / "results" / "result.json").read_text())
    ws, n = full["workers"], full["train_rows"]

    def us(seconds: float) -> float:
        return round(seconds / n * 1e6, 2)

    train = sum(w["main_cpu_s"] for w in ws)
    # the workers' other threads during their loops: the prefetch stage (its own thread CPU counts its
    # start-up too, numba's runtime among it, so the process's loop CPU less the training thread's is used)
    rest = sum(w["loop_cpu_s"] for w in ws) - train
    shard = sum(full.get("shard_loop_cpu_s", []))
    keys = sum(full.get("shard_keys", []))
    return {
        "shards": shards, "workers": workers, "merge": label, "dense_parts": parts, "train_rows": n,
        "samples_per_s": full["samples_per_s"], "train_seconds": full["train_seconds"], "wall_s": round(wall, 1),
        "test_auc": round(full["test_auc"], 4), "test_logloss": round(full["test_logloss"], 4),
        "cpu_us_per_sample": {"train": us(train), "prefetch_io": us(rest), "shards": us(shard),
                              "loop_total": us(train + rest + shard),
                              "job_total": us(job_cpu)},
        "worker_rss_mb": {"before_data": max((w.get("rss_before_data_mb") or 0.0) for w in ws),
                          "peak": max(w["peak_rss_mb"] for w in ws)},
        "shard_peak_rss_mb": max(full["rss_mb"]["shards"]), "job_peak_rss_mb": res["peak_rss_mb"],
        "staleness": full.get("staleness"),
        **shard_capacity(keys, n, workers_us=us(train + rest), shard_us=us(shard)),
    }


def shard_capacity(keys: int, samples: int, *, workers_us: float, shard_us: float) -> dict:
    """What one shard takes: the keys it served (pulls and pushes) per second of its CPU, and how many
    workers of this job it keeps up with when every process has a core (the workers' CPU per sample over
    the shards': a worker trains 1e6 / workers_us samples/s, a shard serves 1e6 / shard_us)."""
    if not keys or shard_us <= 0:
        return {"keys_per_sample": None, "shard_keys_per_cpu_s": None, "workers_per_shard": None}
    return {"keys_per_sample": round(keys / samples, 1),
            "shard_keys_per_cpu_s": round(keys / (shard_us * samples / 1e6)),
            "workers_per_shard": round(workers_us / shard_us, 1)}


def add_ratios(rows: list[dict], cores: int) -> None:
    """Each row against the 1-worker row of its shard count (the baseline of this run)."""
    base = {r["shards"]: r for r in rows if r["workers"] == 1}
    for r in rows:
        b = base.get(r["shards"])
        if b is None:
            continue
        r["auc_minus_1_worker"] = round(r["test_auc"] - b["test_auc"], 4)
        r["cpu_per_sample_over_1_worker"] = round(r["cpu_us_per_sample"]["loop_total"]
                                                  / b["cpu_us_per_sample"]["loop_total"], 2)
        # a speed-up means something only when every worker and shard has a core of its own
        r["speedup"] = (round(r["samples_per_s"] / b["samples_per_s"], 2)
                        if r["workers"] + r["shards"] <= cores else None)


def _quantile(row: dict, q: str) -> str:
    st = row.get("staleness") or {}
    return "-" if st.get(q) is None else str(st[q])


def _scaled(value: float | None, factor: float) -> str:
    return "-" if value is None else f"{value * factor:.1f}"


def add_shards_advice(rows: list[dict]) -> str | None:
    """When to add shards, from the run's rows: the fewest workers one shard kept up with."""
    per_shard = [r["workers_per_shard"] for r in rows if r.get("workers_per_shard")]
    if not per_shard:
        return None
    keys = [r["keys_per_sample"] for r in rows if r.get("keys_per_sample")]
    rate = [r["shard_keys_per_cpu_s"] for r in rows if r.get("shard_keys_per_cpu_s")]
    least = min(per_shard)
    return (f"shards: one shard served {_span(rate, 1e-6)}M keys per CPU second ({_span(keys, 1)} keys per sample) "
            f"and keeps up with {_span(per_shard, 1)} workers of this job on cores of their own: add a shard per "
            f"{max(1, int(least))} workers")


def _span(values: list[float], factor: float) -> str:
    low, high = min(values) * factor, max(values) * factor
    return f"{low:.1f}" if f"{low:.1f}" == f"{high:.1f}" else f"{low:.1f}-{high:.1f}"


def _label_width(out: dict) -> int:
    return max(13, *(len(r["merge"]) + 1 for r in out["rows"]))


def print_table(out: dict) -> None:
    s = out["setup"]
    dense = (f"local merged every {s['dense_sync_steps']} steps" if s["dense_update"] == "local"
             else s["dense_update"])
    adam = f"Adam {s['lr']} (lr scaling {s['lr_scaling']}" + (
        ")" if s["dense_beta1"] is None else f", beta1 {s['dense_beta1']})")
    batch = f"{s['batch_size']} per job (/ workers)" if s["global_batch"] else f"{s['batch_size']} per worker"
    if s["split_dense"]:
        batch += " (the MLP's steps: / workers)"
    print(f"scale: wide&deep dim {s['dim']}, MLP {s['mlp']}, batch {batch}, {adam}, dense_update "
          f"{dense}; {s['rows']:,} train rows, {s['test_rows']:,} test rows "
          f"(planted, Bayes AUC {out['bayes_auc']:.4f}); {out['cores']} cores")
    print("CPU us per trained sample during the training loops: train = workers' training threads, pf+io = their "
          "other threads\n(prefetch: parse, features, pull; zmq I/O), shards; job = every process of the job from "
          "start to exit (start-up, test pass)")
    head = (f"{'sh':>3}{'wk':>4} {'merge':<{_label_width(out)}}{'samples/s':>10}{'speed':>6}{'train':>7}{'pf+io':>7}"
            f"{'shards':>7}{'loop':>7}{'x1wk':>6}{'job':>7}{'RSS0':>6}{'RSSpk':>6}{'AUC':>8}{'dAUC':>8}{'wall':>6}"
            f"{'st50':>6}{'st99':>6}{'Mkey/cs':>8}{'wk/sh':>6}")
    print(head)
    width = _label_width(out)
    for r in out["rows"]:
        c, m = r["cpu_us_per_sample"], r["worker_rss_mb"]
        speed = "-" if r.get("speedup") is None else f"{r['speedup']:.2f}"
        print(f"{r['shards']:>3}{r['workers']:>4} {r['merge']:<{width}}{r['samples_per_s']:>10,.0f}{speed:>6}"
              f"{c['train']:>7.1f}{c['prefetch_io']:>7.1f}{c['shards']:>7.1f}"
              f"{c['loop_total']:>7.1f}{r.get('cpu_per_sample_over_1_worker', float('nan')):>6.2f}"
              f"{c['job_total']:>7.1f}{m['before_data']:>6.0f}{m['peak']:>6.0f}{r['test_auc']:>8.4f}"
              f"{r.get('auc_minus_1_worker', float('nan')):>+8.4f}{r['wall_s']:>6.0f}"
              f"{_quantile(r, 'p50'):>6}{_quantile(r, 'p99'):>6}"
              f"{_scaled(r.get('shard_keys_per_cpu_s'), 1e-6):>8}{_scaled(r.get('workers_per_shard'), 1):>6}")
    print("RSS0 / RSSpk: MB of the largest worker before its training loop / at its peak; x1wk: loop CPU per sample "
          "over the 1-worker row's; dAUC: test AUC minus the 1-worker row's; wall: seconds of the whole job; "
          "st50 / st99: staleness p50 / p99 (updates to a row between a worker's pull and its push); Mkey/cs: "
          "millions of keys (pulled and pushed) a shard served per second of its CPU; wk/sh: workers one shard keeps "
          "up with when every process has a core (the workers' CPU per sample over the shards')")
    if out.get("shards_advice"):
        print(out["shards_advice"])
    for note in out["notes"]:
        print(f"note: {note}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000, help="training rows")
    ap.add_argument("--test-rows", type=int, default=200_000)
    ap.add_argument("--quick", action="store_true",
                    help=f"{QUICK_ROWS:,} training rows and 50,000 test rows (a run that finishes on 2 cores)")
    ap.add_argument("--workers", default="1,2,4,8,16,32", help="worker counts, comma-separated")
    ap.add_argument("--shards", default="1", help="shard counts, comma-separated (each with every worker count)")
    ap.add_argument("--merge", default="", help="model.dense_merge rules to compare, comma-separated "
                                                "(empty: the model's default)")
    ap.add_argument("--variant", action="append", default=[], metavar="NAME=JSON",
                    help="a dense rule to compare, as model keys (repeatable; each at every worker count, the "
                         "first also at 1 worker), e.g. 'slowmo={\"dense_outer\": {\"lr\": 1, \"momentum\": "
                         "0.5}}'; the job's keys: \"dense_parts\" (an int, \"K\" or \"K/4\"), \"dense_sync_steps\", "
                         "\"lr_scaling\"")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dim", type=int, default=9)
    ap.add_argument("--mlp", default="400,400,400")
    ap.add_argument("--batch-size", type=int, default=512)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--dense-sync-steps", type=int, default=DEFAULT_DENSE_SYNC_STEPS)
    ap.add_argument("--dense-update", choices=["local", "ps"], default="local")
    ap.add_argument("--staleness-sample", type=int, default=64,
                    help="the shards follow 1 in N keys' staleness (0: off; on, the shards' CPU includes it)")
    ap.add_argument("--global-batch", action="store_true",
                    help="--batch-size is the job's: each of K workers takes batch-size / K rows per step")
    ap.add_argument("--split-dense", action="store_true",
                    help="at K workers each worker's MLP takes K steps per batch, one per 1/K of its records")
    ap.add_argument("--dense-beta1", type=float, help="the dense Adam's beta1 (default: the model's)")
    ap.add_argument("--lr-scaling", choices=sorted(LR_SCALING), default="none",
                    help="the dense lr at K workers: --lr times 1, sqrt(K) or K")
    ap.add_argument("--warmup-rows", type=int, default=5_000, help="a warm-up job's rows (0: none)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args()
    if args.quick:
        args.rows, args.test_rows = QUICK_ROWS, min(args.test_rows, 50_000)
    workers = sorted({int(w) for w in args.workers.split(",")})
    shard_counts = sorted({int(s) for s in args.shards.split(",")})
    variants = [(m.strip(), {"dense_merge": m.strip()}) for m in args.merge.split(",") if m.strip()]
    variants += [parse_variant(v) for v in args.variant]
    variants = variants or [("default", {})]
    cores = len(os.sched_getaffinity(0))
    notes = [f"staleness: over 1 in {args.staleness_sample} keys' pushes" if args.staleness_sample
             else "staleness: not measured (--staleness-sample 0)"]
    with tempfile.TemporaryDirectory(prefix="streamrec-scale-") as tmp:
        work = Path(tmp)
        data = make_planted(work, args.rows, args.test_rows, args.seed)
        if args.warmup_rows:
            warm_up(_job_args(args, 1, 1), data.train, work)
        rows = []
        for shards in shard_counts:
            for w in workers:
                for variant in variants if w > 1 else variants[:1]:  # one worker: the first rule's
                    row = one_job(args, data, work, shards, w, variant)
                    rows.append(row)
                    print(f"# {shards} shard(s) / {w} worker(s) {row['merge']}: {row['samples_per_s']:,.0f}/s, "
                          f"AUC {row['test_auc']:.4f}, {row['wall_s']:.0f} s", file=sys.stderr, flush=True)
    add_ratios(rows, cores)
    busiest = max(r["workers"] + r["shards"] for r in rows)
    notes.append("samples/s: train rows over the longest worker's loop (train-files' figure); where the workers' "
                 "loops do not overlap (more processes than cores, a loaded machine) it overstates the job's rate")
    if busiest > cores:
        notes.append(f"this machine has {cores} cores, fewer than the {busiest} processes of the largest job: "
                     "no speed-up is printed where workers + shards exceed the cores; CPU per sample is the figure "
                     "that carries over to a machine with a core per process")
    out = {"setup": {"rows": args.rows, "test_rows": args.test_rows, "dim": args.dim, "mlp": args.mlp,
                     "batch_size": args.batch_size, "lr": args.lr, "dense_sync_steps": args.dense_sync_steps,
                     "dense_update": args.dense_update, "lr_scaling": args.lr_scaling,
                     "dense_beta1": args.dense_beta1, "global_batch": args.global_batch,
                     "split_dense": args.split_dense,
                     "seed": args.seed},
           "cores": cores, "bayes_auc": round(data.bayes_auc, 4), "rows": rows,
           "shards_advice": add_shards_advice(rows), "notes": notes}
    return print_result(out, as_json=args.json, table=print_table)


if __name__ == "__main__":
    sys.exit(main())
