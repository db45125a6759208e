"""Dense-table optimizer benchmark: one push (optimizer step) on a shard's dense table.

For the dense vector of the issue's model (wide&deep dim 9 over 26 slots + 13 dense inputs,
MLP 400-400-400: 420,401 weights) and each of Adam, Adagrad and SGD it measures in one run,
interleaved:

- ours: :meth:`tables.dense_table.DenseTable.push` (element-wise numba pass, one step count);
- rows: the previous DenseTable push (the sparse rules of :mod:`tables.optimizers` over the
  vector viewed as (n, 1) rows, per-row Adam powers, ``np.isfinite(g).all()`` first);
- numpy: the same rule written as vectorised numpy expressions (float32, in place where numpy allows).

    python bench/dense.py            # human table with ratios
    python bench/dense.py --json     # one JSON object
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from launcher.file_job import criteo_model  # noqa: E402
from models import build_model  # noqa: E402
from tables.dense_table import DenseTable  # noqa: E402
from tables.optimizers import Optimizer  # noqa: E402
from tables.table_config import DenseTableConfig, OptimizerConfig  # noqa: E402

OPTIMIZERS = {"adam": OptimizerConfig(kind="adam", lr=1e-3), "adagrad": OptimizerConfig(kind="adagrad", lr=0.05),
              "sgd": OptimizerConfig(kind="sgd", lr=0.05)}


def issue_model_size() -> int:
    model = build_model(criteo_model("wide_deep", embedding_dim=9, mlp=(400, 400, 400), optimizer="adam", lr=1e-3))
    return int(model.params.values.shape[0])


class RowsPush:
    """The previous DenseTable push: sparse kernels over (n, 1) rows."""

    def __init__(self, c: OptimizerConfig, w: np.ndarray) -> None:
        self.value = w.reshape(-1, 1).copy()
        self.rule = Optimizer(c, 1)
        self.state = np.zeros((w.shape[0], self.rule.state_width), np.float32)
        self.rows = np.arange(w.shape[0], dtype=np.int64)
        self.rule.init_state(self.value, self.state, self.rows, 0)

    def __call__(self, g: np.ndarray) -> None:
        if not np.isfinite(g).all():
            raise ValueError("non-finite")
        self.rule.apply(self.value, self.state, self.rows, g.reshape(-1, 1), 0)


class NumpyPush:
    """The rule as numpy expressions (what a table without compiled kernels would do)."""

    def __init__(self, c: OptimizerConfig, w: np.ndarray) -> None:
        self.c, self.w = c, w.copy()
        self.m, self.v = np.zeros_like(w), np.zeros_like(w)
        self.acc = np.full_like(w, c.initial_accumulator)
        self.t = 0

    def __call__(self, g: np.ndarray) -> None:
        if not np.isfinite(g).all():
            raise ValueError("non-finite")
        c, f = self.c, np.float32
        self.t += 1
        if c.kind == "adam":
            self.m *= f(c.beta1)
            self.m += f(1 - c.beta1) * g
            self.v *= f(c.beta2)
            self.v += f(1 - c.beta2) * g * g
            lr_t = f(c.lr * np.sqrt(1 - c.beta2**self.t) / (1 - c.beta1**self.t))
            self.w -= lr_t * self.m / (np.sqrt(self.v) + f(c.eps))
        elif c.kind == "adagrad":
            self.acc += g * g
            self.w -= f(c.lr) * g / (np.sqrt(self.acc) + f(c.eps))
        else:
            self.w -= f(c.lr) * g


def interleaved_ms(fns: dict[str, Callable[[np.ndarray], Any]], grads: list[np.ndarray], *, rounds: int,
                   reps: int) -> dict[str, float]:
    """Median ms per push of each fn, measured in alternating rounds of ``reps`` pushes, so load
    from other processes hits every variant alike."""
    for fn in fns.values():
        fn(grads[0])  # compile / warm up
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            for i in range(reps):
                fn(grads[i % len(grads)])
            times[name].append((time.perf_counter() - t0) / reps * 1e3)
    return {k: statistics.median(v) for k, v in times.items()}


def run(size: int, rounds: int, reps: int) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    w0 = (rng.normal(size=size) * 0.05).astype(np.float32)
    grads = [(rng.normal(size=size) * 1e-3).astype(np.float32) for _ in range(4)]
    out: dict[str, Any] = {"weights": size, "rounds": rounds, "pushes_per_round": reps, "optimizers": {}}
    for kind, c in OPTIMIZERS.items():
        table = DenseTable(DenseTableConfig(name="dense", optimizer=c), w0)
        ms = interleaved_ms({"ours": table.push, "rows": RowsPush(c, w0), "numpy": NumpyPush(c, w0)}, grads,
                            rounds=rounds, reps=reps)
        out["optimizers"][kind] = {f"{k}_ms": round(v, 3) for k, v in ms.items()} | {
            "speedup_vs_rows": round(ms["rows"] / ms["ours"], 2),
            "speedup_vs_numpy": round(ms["numpy"] / ms["ours"], 2)}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, help="weights (default: the issue's wide&deep model, 420,401)")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args()
    res = run(args.size or issue_model_size(), args.rounds, args.reps)
    if args.json:
        print(json.dumps(res))
        return 0
    print(f"dense push of {res['weights']:,} weights (median of {args.rounds} interleaved rounds)")
    print(f"{'optimizer':>9} {'ours ms':>8} {'rows ms':>8} {'numpy ms':>9} {'x rows':>7} {'x numpy':>8}")
    for kind, r in res["optimizers"].items():
        print(f"{kind:>9} {r['ours_ms']:>8.3f} {r['rows_ms']:>8.3f} {r['numpy_ms']:>9.3f} "
              f"{r['speedup_vs_rows']:>7.2f} {r['speedup_vs_numpy']:>8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
