"""Restoring a table four times its RAM budget: a tiered table's load beside an all-RAM table's.

A base and a delta of ``--rows`` rows (dim 16, Adagrad) are saved once; then, each in a
process of its own (a shard's stand-in, so its memory is its own), a fresh table with a disk
tier and a RAM budget of a quarter of the rows loads them, and a fresh all-RAM table loads the
same files; each process first saves and loads a small table of its kind, so the kernels'
compiled code is loaded before the measurement. Peak memory during the load: anonymous RSS
(``RssAnon``, the table's arrays and the load's buffers, sampled every 2 ms) and the peak RSS
the kernel records (``VmHWM``, reset just before the load), each less what the process held
before it; and the tiered table's own byte accounting (:func:`tables.budget.table_bytes`,
store and index) after the load beside its budget.
Run: ``python -m bench.tier_restore [--rows N] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench import REPO, print_result

DIM = 16
BATCH = 1 << 16


def _config(tier: Path | None, budget: int | None) -> Any:
    from tables.table_config import TableConfig

    data: dict[str, Any] = {"name": "emb", "dim": DIM, "optimizer": {"kind": "adagrad", "lr": 0.05},
                            "initializer": {"kind": "uniform", "scale": 0.01}}
    if budget is not None:
        data["eviction"] = {"max_bytes": budget}
    if tier is not None:
        data["tier"] = {"disk": {"path": str(tier), "max_bytes": 1 << 40}}
    return TableConfig.model_validate(data)


def _status(field: str) -> int:
    """A /proc/self/status figure, in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(field)


def save(rows: int, out: Path) -> dict[str, Any]:
    """Base then delta of ``rows`` rows, their shows spread so the eviction score orders them."""
    from tables.budget import table_bytes
    from tables.sparse_table import SparseTable

    t = SparseTable(_config(None, None))
    rng = np.random.default_rng(7)
    keys = rng.permutation(np.arange(1, rows + 1, dtype=np.uint64))
    for start in range(0, rows, BATCH):
        k = keys[start : start + BATCH]
        t.push(k, rng.standard_normal((k.shape[0], DIM), np.float32), shows=rng.random(k.shape[0]) * 10, unique=True)
    t.save(out / "base", "base")
    again = keys[: rows // 10]
    t.push(again, np.ones((again.shape[0], DIM), np.float32), unique=True)
    t.save(out / "delta", "delta")
    return {"rows": rows, "bytes": table_bytes(t.state)}


def load(out: Path, tier: Path | None, budget: int | None) -> dict[str, Any]:
    from tables.budget import table_bytes
    from tables.sparse_table import SparseTable

    if tier is not None:  # the kernels' compiled code is the process's, not the load's: loaded first
        scratch = SparseTable(_config(tier / "warm", 1 << 20))
        scratch.push(np.arange(1, 20_001, dtype=np.uint64), np.ones((20_000, DIM), np.float32))
        scratch.save(out / "warm", "base")
        SparseTable(_config(tier / "warm", 1 << 20)).load(out / "warm")
    else:
        scratch = SparseTable(_config(None, None))
        scratch.push(np.arange(1, 20_001, dtype=np.uint64), np.ones((20_000, DIM), np.float32))
        scratch.save(out / "warm", "base")
        SparseTable(_config(None, None)).load(out / "warm")
    del scratch
    t = SparseTable(_config(tier, budget))
    before = _status("RssAnon")
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := the RSS now
    hwm0 = _status("VmHWM")
    peak = [before]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.002):
            peak[0] = max(peak[0], _status("RssAnon"))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    cpu = time.process_time()
    t.load(out / "base")
    t.load(out / "delta")
    cpu = time.process_time() - cpu
    done.set()
    sampler.join()
    peak[0] = max(peak[0], _status("RssAnon"))
    st = t.stats()
    return {"peak_anon_mib": (peak[0] - before) / 2**20, "peak_rss_mib": (_status("VmHWM") - hwm0) / 2**20,
            "table_mib": table_bytes(t.state) / 2**20, "ram_rows": st["rows"], "disk_rows": st.get("disk_rows", 0),
            "load_cpu_s": cpu}


def _child(args: list[str]) -> dict[str, Any]:
    got = subprocess.run([sys.executable, "-m", "bench.tier_restore", *args], cwd=REPO, check=True,
                         capture_output=True, text=True)
    return json.loads(got.stdout.splitlines()[-1])


def run(rows: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="tier-restore-") as tmp:
        saved = _child(["--role", "save", "--rows", str(rows), "--dir", tmp])
        budget = saved["bytes"] // 4
        tiered = _child(["--role", "load", "--dir", tmp, "--budget", str(budget), "--tier", f"{tmp}/tier"])
        all_ram = _child(["--role", "load", "--dir", tmp])
    return {"rows": rows, "table_mib": saved["bytes"] / 2**20, "budget_mib": budget / 2**20, "tiered": tiered,
            "all_ram": all_ram, "anon_ratio": tiered["peak_anon_mib"] / all_ram["peak_anon_mib"]}


def _table(r: dict[str, Any]) -> None:
    print(f"{r['rows']} rows, {r['table_mib']:.0f} MiB all in RAM; tiered RAM budget {r['budget_mib']:.0f} MiB")
    print(f"{'load (base + delta)':<22}{'peak anon MiB':>14}{'peak RSS MiB':>14}{'table MiB':>11}"
          f"{'RAM rows':>10}{'disk rows':>11}{'cpu s':>7}")
    for name in ("tiered", "all_ram"):
        x = r[name]
        print(f"{name:<22}{x['peak_anon_mib']:>14.0f}{x['peak_rss_mib']:>14.0f}{x['table_mib']:>11.0f}"
              f"{x['ram_rows']:>10}{x['disk_rows']:>11}{x['load_cpu_s']:>7.1f}")
    print(f"tiered / all-RAM peak anon: {r['anon_ratio']:.2f}x")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--role", choices=("save", "load"), help=argparse.SUPPRESS)
    ap.add_argument("--dir", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--budget", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--tier", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.role == "save":
        print(json.dumps(save(args.rows, args.dir)))
        return 0
    if args.role == "load":
        print(json.dumps(load(args.dir, args.tier, args.budget)))
        return 0
    return print_result(run(args.rows), as_json=args.json, table=_table)


if __name__ == "__main__":
    sys.exit(main())
