"""Start-up cost per role: seconds from a process's exec to its first answer, its CPU, its RSS before data.

- shard: ``streamrec shard`` from exec to its first answered pull (it loads its kernels before it
  binds, so the pull is warm); its CPU seconds and RSS then.
- worker: a 1-shard, 1-worker ``streamrec train-files`` job on a small planted set (bench/train.py's
  model): the worker from exec to the end of its first training step, its CPU before the loop
  (imports, numba's registries and kernels, model, connections) and its RSS then.
- each role is started both ways (``up.start_method``): ``spawn`` (exec'd, a fresh interpreter)
  and ``fork_server`` (forked from a parent that loaded numba and streamrec once,
  :mod:`core.fork_server`); the ratio of the two, and the fork server's own one-time CPU.
- test pass: records/s of worker 0's test pass against its training loop's, and CPU per record of
  each (on a loaded machine wall-clock rates are noise; CPU per record is the figure).
- reference rows: what any process pays (an interpreter, numpy, numba and its registries) and a
  worker's imports now against the same with kafka, scipy.linalg, prometheus_client and crc32c
  loaded first (what a worker imported before they became lazy): the difference is what those
  imports cost.

A warm-up job fills numba's cache first. Each figure is the median of ``--repeats`` runs.

Run: ``python -m bench.startup [--repeats 3] [--rows 20000] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

from bench import print_result
from bench.train import make_planted, run_training, warm_up
from core.errors import Unavailable
from core.fork_server import ForkServer, StartMethod
from launcher.file_job import criteo_model
from launcher.launch import free_ports, thread_limits
from ps.client import PSClient
from ps.ps_config import ClientConfig, PSConfig
from trainer.process_stats import process_cpu_seconds

REPO = Path(__file__).resolve().parent.parent
TARGET_START_S = 1.0  # a worker or shard starts in well under a second (warm numba cache)
TARGET_RSS_MB = 200.0  # a worker's RSS before data
_WORKER_NOW = "import trainer.file_worker as w; w.load_numba_runtime()"
BEFORE, NOW = "worker imports + numba registries, as before", "worker imports + numba registries, now"
REFERENCE = {
    "python": "pass",
    "python + numpy": "import numpy",
    "python + numpy + numba registries": "from core.kernel_cache import load_runtime; load_runtime()",
    BEFORE: "import kafka, scipy.linalg, prometheus_client, crc32c; " + _WORKER_NOW,
    NOW: _WORKER_NOW,
}


def _median(values: list[float]) -> float:
    return round(statistics.median(values), 3)


def run_snippet(code: str) -> dict[str, float]:
    """``python -c code`` in the repository: wall seconds, CPU seconds and peak RSS (MB) of that process
    (VmHWM, printed by the process: ru_maxrss would count this bigger parent's, which the child forked from)."""
    peak = "\nprint(next(ln for ln in open('/proc/self/status') if ln.startswith('VmHWM:')).split()[1])"
    t = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", code + peak], cwd=REPO, stdout=subprocess.PIPE, text=True)
    out = proc.stdout.read() if proc.stdout else ""
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"python -c {code!r} failed ({proc.returncode})")
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "rss_mb": int(out.split()[-1]) / 1024}


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def shard_start(ps_yaml: Path, forker: ForkServer | None = None) -> dict[str, float]:
    """One shard from exec (or fork, given ``forker``) to its first answered pull."""
    port = free_ports(1)[0]
    argv = [sys.executable, "-m", "cli", "shard", "--config", str(ps_yaml), "--index", "0", "--port", str(port)]
    t = time.perf_counter()
    if forker is None:
        proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    else:
        with open(os.devnull, "wb") as null:
            proc = forker.start_role(argv, {**os.environ, **thread_limits(1)}, null)
    try:
        table = PSConfig.model_validate(yaml.safe_load(ps_yaml.read_text())).tables[0].name
        config = ClientConfig(timeout_s=0.05, retries=0)
        keys = np.arange(1, 513, dtype=np.uint64)
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"the shard exited ({proc.returncode}) before it answered")
            # a client per attempt, as the launcher's health check: a closed one drops what it queued
            with PSClient([f"tcp://127.0.0.1:{port}"], config=config) as client:
                try:
                    client.wait(client.pull(table, keys))
                    break
                except Unavailable:  # not listening yet
                    continue
        wall = time.perf_counter() - t
        return {"wall_s": wall, "cpu_s": process_cpu_seconds(proc.pid), "rss_mb": _rss_mb(proc.pid)}
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()


def _job_args(args: argparse.Namespace) -> argparse.Namespace:
    return argparse.Namespace(dim=9, mlp="400,400,400", batch_size=512, lr=1e-3, servers=1, workers=1,
                              dense_sync_steps=64, ps_pull_steps=1, warmup_rows=args.warmup_rows,
                              dense_update="local")


def worker_start(args: argparse.Namespace, data, work: Path, method: StartMethod) -> dict[str, float]:
    """One train-files job: its worker's start-up and its test pass against its training loop."""
    run_training(_job_args(args), data.train, data.test, work, "local", extra=("--start-method", str(method)))
    full = json.loads((work / "job" / "results" / "result.json").read_text())
    w = full["workers"][0]
    train_us = w["loop_cpu_s"] / w["records"] * 1e6
    test_us = full["test_cpu_s"] / full["test_rows"] * 1e6
    return {"wall_s": w["start_to_first_step_s"], "cpu_s": w["setup_cpu_s"], "rss_mb": w["rss_before_data_mb"],
            "train_per_s": full["samples_per_s"], "test_per_s": full["test_samples_per_s"],
            "train_cpu_us": train_us, "test_cpu_us": test_us}


def measure(args: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory(prefix="streamrec-startup-") as tmp:
        work = Path(tmp)
        data = make_planted(work, args.rows, args.test_rows, args.seed)
        ps_yaml = work / "ps.yaml"
        model = criteo_model("wide_deep", embedding_dim=9, mlp=(400, 400, 400), optimizer="adam", lr=1e-3)
        ps_yaml.write_text(yaml.safe_dump(PSConfig(tables=model.table_configs()).model_dump(mode="json")))
        if args.warmup_rows:
            warm_up(_job_args(args), data.train, work)
        runs: dict[str, list[dict[str, float]]] = {name: [] for name in REFERENCE}
        runs.update({f"{role} {m}": [] for role in ("shard", "worker") for m in StartMethod})
        runs["fork server"] = []
        for _ in range(args.repeats):  # interleaved: a change of the machine's load hits every row alike
            for name, code in REFERENCE.items():
                runs[name].append(run_snippet(code))
            runs["shard spawn"].append(shard_start(ps_yaml))
            forker = ForkServer({**os.environ, **thread_limits(1)})
            try:
                t = time.perf_counter()
                runs["shard fork_server"].append(shard_start(ps_yaml, forker))  # its first role pays the preload
                runs["fork server"].append({"wall_s": time.perf_counter() - t,
                                            "cpu_s": process_cpu_seconds(forker.server_pid), "rss_mb": 0.0})
                runs["shard fork_server"][-1] = shard_start(ps_yaml, forker)
            finally:
                forker.close()
            for m in StartMethod:
                runs[f"worker {m}"].append(worker_start(args, data, work, m))
    rows = {name: {k: _median([r[k] for r in rs]) for k in rs[0]} for name, rs in runs.items()}
    return {"setup": {"repeats": args.repeats, "rows": args.rows, "test_rows": args.test_rows},
            "cores": len(os.sched_getaffinity(0)), "load_1min": round(os.getloadavg()[0], 1), "rows": rows,
            "targets": {"start_s": TARGET_START_S, "worker_rss_mb": TARGET_RSS_MB, "test_over_train_rate": 1.0}}


def print_table(out: dict) -> None:
    rows, s = out["rows"], out["setup"]
    print(f"startup: medians of {s['repeats']} runs, numba's cache warm; {out['cores']} cores, load {out['load_1min']} "
          f"at the end; worker job: {s['rows']:,} train rows, {s['test_rows']:,} test rows")
    print(f"{'process':<56}{'wall s':>8}{'CPU s':>8}{'RSS MB':>8}  target")
    for name in REFERENCE:
        r = rows[name]
        print(f"{name:<56}{r['wall_s']:>8.3f}{r['cpu_s']:>8.3f}{r['rss_mb']:>8.1f}")
    for m in StartMethod:
        r = rows[f"shard {m}"]
        print(f"{f'shard ({m}): start to its first answered pull':<56}{r['wall_s']:>8.3f}{r['cpu_s']:>8.3f}"
              f"{r['rss_mb']:>8.1f}  < {TARGET_START_S:g} s")
    for m in StartMethod:
        w = rows[f"worker {m}"]
        print(f"{f'worker ({m}): start to its first step':<56}{w['wall_s']:>8.3f}{w['cpu_s']:>8.3f}"
              f"{w['rss_mb']:>8.1f}  < {TARGET_START_S:g} s, RSS before data <= {TARGET_RSS_MB:g} MB")
    f = rows["fork server"]
    print(f"{'fork server: start, preload, first shard (once)':<56}{f['wall_s']:>8.3f}{f['cpu_s']:>8.3f}")
    for role in ("shard", "worker"):
        old, new = rows[f"{role} spawn"], rows[f"{role} fork_server"]
        print(f"{role}: fork_server / spawn: CPU {new['cpu_s'] / old['cpu_s']:.2f}x, "
              f"wall {new['wall_s'] / old['wall_s']:.2f}x")
    w = rows["worker spawn"]
    before, now = rows[BEFORE], rows[NOW]
    print(f"imports made lazy: {before['cpu_s'] - now['cpu_s']:.3f} CPU s and "
          f"{before['rss_mb'] - now['rss_mb']:.1f} MB less per worker process")
    print(f"test pass: {w['test_per_s']:,.0f} records/s against the training loop's {w['train_per_s']:,.0f} "
          f"({w['test_per_s'] / w['train_per_s']:.2f}x, target >= 1); CPU per record {w['test_cpu_us']:.1f} us against "
          f"{w['train_cpu_us']:.1f} us ({w['train_cpu_us'] / w['test_cpu_us']:.2f}x cheaper)")
    print("wall: exec to answer (a worker's counts to the kernel's 10 ms tick); CPU: the process's until then "
          "(a worker's until its loop starts); RSS: peak (reference rows), now (shard), before data (worker)")
    if out["load_1min"] > out["cores"]:
        print(f"note: the load ({out['load_1min']}) exceeds the {out['cores']} cores: wall seconds include waiting "
              "for a core; CPU seconds are the figure that carries over")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--rows", type=int, default=20_000, help="the worker job's training rows")
    ap.add_argument("--test-rows", type=int, default=50_000, help="the worker job's test rows")
    ap.add_argument("--warmup-rows", type=int, default=5_000, help="a warm-up job's rows (0: none)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args()
    out = measure(args)
    return print_result(out, as_json=args.json, table=print_table)


if __name__ == "__main__":
    sys.exit(main())
