"""Sparse table benchmark: streamrec's numba table beside a Python-dict baseline, same run.

dim 16, Adagrad, a table filled to --rows rows (default 10M), --batch-key batches (1M), for
uniform and Zipf(1.1) keys over the stored ids. Reports pull/push keys/s of both and their
ratio, resident bytes per row against the payload, and base save/load MB/s. And a stream of
never-seen ids (--budget-rows rows, 100k-key pushes) into an unbudgeted table (it grows) vs
tables full at a byte budget (evict: every push evicts the coldest; refuse), same run.
Run: ``python -m bench.tables [--rows N] [--json]``. ``--tiered``: a table with a disk tier holding
4x its RAM budget beside the same table all in RAM instead (:mod:`bench.tiered_tables`, whose
flags follow it).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from bench import tiered_tables
from bench.table_streams import key_batches, rss_bytes
from tables.sparse_table import SparseTable
from tables.table_config import EvictionConfig, OptimizerConfig, TableConfig

DIM = 16
PAYLOAD = 8 + DIM * 4 + 4 + 12  # key + embedding + adagrad accumulator + ~12 bytes of metadata (the target's figure)


def raw_write_mb_per_s(path: Path, nbytes: int) -> float:
    """Baseline: plain sequential write + fsync of the same number of bytes."""
    block = np.ones(64 << 20, np.uint8)
    t = time.perf_counter()
    with open(path, "wb") as f:
        left = nbytes
        while left > 0:
            f.write(block[: min(left, block.shape[0])])
            left -= block.shape[0]
        f.flush()
        os.fsync(f.fileno())
    mb_s = nbytes / 1e6 / (time.perf_counter() - t)
    path.unlink()
    return mb_s


def timed(fn, batches: list[np.ndarray]) -> float:
    fn(batches[0])  # warm-up (compilation, page faults)
    t = time.perf_counter()
    for b in batches[1:]:
        fn(b)
    return sum(b.shape[0] for b in batches[1:]) / (time.perf_counter() - t)


class DictTable:
    """The baseline: a Python dict of row indices into numpy arrays, numpy Adagrad."""

    def __init__(self, dim: int, lr: float = 0.05) -> None:
        self.index: dict[int, int] = {}
        self.emb = np.zeros((1024, dim), np.float32)
        self.acc = np.zeros(1024, np.float32)
        self.lr = lr

    def _rows(self, keys: np.ndarray, *, create: bool) -> np.ndarray:
        idx = self.index
        if not create:
            return np.fromiter((idx.get(k, -1) for k in keys.tolist()), np.int64, keys.shape[0])
        rows = np.empty(keys.shape[0], np.int64)
        for i, k in enumerate(keys.tolist()):
            r = idx.get(k)
            if r is None:
                r = idx[k] = len(idx)
            rows[i] = r
        n = len(idx)
        if n > self.emb.shape[0]:
            cap = max(n, 2 * self.emb.shape[0])
            self.emb = np.concatenate([self.emb, np.zeros((cap - self.emb.shape[0], self.emb.shape[1]), np.float32)])
            self.acc = np.concatenate([self.acc, np.zeros(cap - self.acc.shape[0], np.float32)])
        return rows

    def pull(self, keys: np.ndarray) -> np.ndarray:
        rows = self._rows(keys, create=False)
        out = self.emb[np.maximum(rows, 0)]
        out[rows < 0] = 0.0
        return out

    def push(self, keys: np.ndarray, grads: np.ndarray) -> None:
        uniq, inv = np.unique(keys, return_inverse=True)
        g = np.zeros((uniq.shape[0], grads.shape[1]), np.float32)
        np.add.at(g, inv, grads)
        rows = self._rows(uniq, create=True)
        self.acc[rows] += (g * g).mean(axis=1)
        self.emb[rows] -= self.lr * g / (np.sqrt(self.acc[rows])[:, None] + 1e-8)


def push_latencies(table: SparseTable, keys: np.ndarray, stop: threading.Event, out: list[float]) -> None:
    """Push 10k-key batches until ``stop``; record each push's latency in seconds."""
    rng = np.random.default_rng(11)
    grads = np.full((10_000, DIM), 0.001, np.float32)
    while not stop.is_set():
        k = keys[rng.integers(0, keys.shape[0], 10_000)]
        t = time.perf_counter()
        table.push(k, grads)
        out.append(time.perf_counter() - t)


def save_stall(table: SparseTable, keys: np.ndarray, path: Path) -> tuple[float, float, dict]:
    """Worst push latency while a base save runs, and without one (same duration)."""
    results = []
    for saving in (False, True):
        lat: list[float] = []
        stop = threading.Event()
        th = threading.Thread(target=push_latencies, args=(table, keys, stop, lat))
        th.start()
        t = time.perf_counter()
        if saving:
            manifest = table.save(path, mode="base")
            elapsed = time.perf_counter() - t
        else:
            time.sleep(elapsed_guess := 2.0)
            elapsed = elapsed_guess
        stop.set()
        th.join()
        results.append((max(lat) if lat else 0.0, float(np.percentile(lat, 99)) if lat else 0.0, elapsed))
    return results[1][0], results[0][0], {"manifest": manifest, "save_s": results[1][2], "p99_during_s": results[1][1],
                                          "p99_without_s": results[0][1]}


def fill(push, n_rows: int, batch: int, rng: np.random.Generator) -> np.ndarray:
    keys = np.unique(rng.integers(0, 2**64, int(n_rows * 1.001) + 16, dtype=np.uint64))[:n_rows]
    keys = rng.permutation(keys)
    grads = np.full((batch, DIM), 0.01, np.float32)
    for a in range(0, n_rows, batch):
        k = keys[a : a + batch]
        push(k, grads[: k.shape[0]])
    return keys


def new_id_stream(n_rows: int, rng: np.random.Generator) -> dict:
    """Pushes of never-seen ids into tables of ``n_rows``: without a budget (the table grows)
    and full at ``eviction.max_bytes`` (evict / refuse); keys/s, bytes held vs the budget."""
    batch = 100_000
    grads = np.full((batch, DIM), 0.001, np.float32)
    probe = SparseTable(TableConfig(name="b", dim=DIM, optimizer=OptimizerConfig(kind="adagrad")))
    fill(probe.push, n_rows, batch, rng)
    budget = int(probe.stats()["bytes"] * 0.8)  # full before the fill ends
    del probe
    out: dict = {"budget_rows": n_rows, "max_bytes": budget}
    for mode in ("none", "evict", "refuse"):
        ev = EvictionConfig() if mode == "none" else EvictionConfig(max_bytes=budget, over_budget=mode)
        t = SparseTable(TableConfig(name="b", dim=DIM, optimizer=OptimizerConfig(kind="adagrad"), eviction=ev))
        fill(t.push, n_rows, batch, rng)
        batches = [rng.integers(0, 2**64, batch, dtype=np.uint64) for _ in range(6)]
        out[f"{mode}_new_keys_per_s"] = timed(lambda k, t=t: t.push(k, grads[: k.shape[0]]), batches)
        st = t.stats()
        out[f"{mode}_bytes"], out[f"{mode}_rows"] = st["bytes"], st["rows"]
        del t
        gc.collect()
    out["evict_vs_none"] = out["evict_new_keys_per_s"] / out["none_new_keys_per_s"]
    out["refuse_vs_none"] = out["refuse_new_keys_per_s"] / out["none_new_keys_per_s"]
    return out


def run(n_rows: int, batch: int, n_batches: int, workdir: Path) -> dict:
    rng = np.random.default_rng(7)
    results: dict = {"uniform": {}, "zipf": {}}
    # Compile the kernels first: numba's compiler memory is not per-row table memory.
    warm = SparseTable(TableConfig(name="warm", dim=DIM, optimizer=OptimizerConfig(kind="adagrad")))
    warm.push(np.arange(64, dtype=np.uint64), np.zeros((64, DIM), np.float32))
    warm.pull(np.arange(128, dtype=np.uint64))
    del warm
    gc.collect()
    rss0 = rss_bytes()
    table = SparseTable(TableConfig(name="bench", dim=DIM, optimizer=OptimizerConfig(kind="adagrad")))
    keys = fill(table.push, n_rows, batch, rng)
    gc.collect()
    bytes_per_row = (rss_bytes() - rss0 - keys.nbytes) / n_rows
    grads = np.full((batch, DIM), 0.001, np.float32)
    for kind in results:
        batches = key_batches(kind, keys, batch, n_batches + 1, rng)
        results[kind]["pull_keys_per_s"] = timed(table.pull, batches)
        results[kind]["push_keys_per_s"] = timed(lambda k, t=table: t.push(k, grads[: k.shape[0]]), batches)
    path = workdir / "base"
    t = time.perf_counter()
    manifest = table.save(path, mode="base")
    save_s = time.perf_counter() - t
    # A second base save while another thread keeps pushing: the push stall it causes.
    stall_s, quiet_max_s, stall_info = save_stall(table, keys, workdir / "base-under-load")
    mb = manifest["files"]["rows"]["bytes"] / 1e6
    raw_mb_s = raw_write_mb_per_s(workdir / "raw", manifest["files"]["rows"]["bytes"])
    del table
    gc.collect()
    fresh = SparseTable(TableConfig(name="bench", dim=DIM, optimizer=OptimizerConfig(kind="adagrad")))
    t = time.perf_counter()
    fresh.load(path)
    load_s = time.perf_counter() - t
    assert fresh.size() == n_rows
    del fresh
    gc.collect()
    base = DictTable(DIM)
    keys_d = fill(base.push, n_rows, batch, np.random.default_rng(7))
    for kind in results:
        batches = key_batches(kind, keys_d, batch, 3, rng)
        results[kind]["dict_pull_keys_per_s"] = timed(base.pull, batches)
        results[kind]["dict_push_keys_per_s"] = timed(lambda k: base.push(k, grads[: k.shape[0]]), batches)
    for r in results.values():
        r.update(bytes_per_row=bytes_per_row, payload_bytes_per_row=PAYLOAD, save_mb_per_s=mb / save_s,
                 load_mb_per_s=mb / load_s, save_mb=mb,
                 raw_write_mb_per_s=raw_mb_s, push_max_ms_during_save=stall_s * 1e3,
                 push_max_ms_without_save=quiet_max_s * 1e3,
                 push_p99_ms_during_save=stall_info["p99_during_s"] * 1e3,
                 push_p99_ms_without_save=stall_info["p99_without_s"] * 1e3)
        r["pull_ratio"] = r["pull_keys_per_s"] / r["dict_pull_keys_per_s"]
        r["push_ratio"] = r["push_keys_per_s"] / r["dict_push_keys_per_s"]
    return results


def print_budget(b: dict) -> None:
    print(f"never-seen ids, 100k-key pushes into {b['budget_rows']:,}-row tables (max_bytes {b['max_bytes']:,}):")
    for mode in ("none", "evict", "refuse"):
        print(f"  {'no budget' if mode == 'none' else mode:9} {b[f'{mode}_new_keys_per_s']:12,.0f} keys/s  "
              f"{b[f'{mode}_rows']:>10,} rows  {b[f'{mode}_bytes']:>13,} bytes"
              + ("" if mode == "none" else f"  ({b[f'{mode}_vs_none']:.2f}x of no budget)"))


def main() -> int:
    if "--tiered" in sys.argv[1:]:
        return tiered_tables.main([a for a in sys.argv[1:] if a != "--tiered"])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--batch-keys", type=int, default=1_000_000)
    ap.add_argument("--batches", type=int, default=5, help="timed batches per measurement (ours)")
    ap.add_argument("--dir", type=Path, default=None, help="where to save (default: a temp dir)")
    ap.add_argument("--budget-rows", type=int, default=1_000_000, help="rows of the new-id stream's tables (0: skip)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--tiered", action="store_true", help="the disk-tier benchmark instead (bench.tiered_tables)")
    args = ap.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="bench-tables-", dir=args.dir))
    try:
        res = run(args.rows, min(args.batch_keys, args.rows), args.batches, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    budget = new_id_stream(args.budget_rows, np.random.default_rng(5)) if args.budget_rows else None
    if args.json:
        print(json.dumps({**res, **({"budget": budget} if budget else {})}))
        return 0
    print(f"sparse table, dim {DIM}, Adagrad, {args.rows:,} rows, {args.batch_keys:,}-key batches (one core)")
    print(f"{'keys':8} {'op':5} {'streamrec keys/s':>17} {'dict keys/s':>12} {'ratio':>7}  target")
    for kind, r in res.items():
        print(f"{kind:8} pull  {r['pull_keys_per_s']:17,.0f} {r['dict_pull_keys_per_s']:12,.0f} "
              f"{r['pull_ratio']:7.1f}x  {'>= 10M/s and >= 8x' if kind == 'uniform' else ''}")
        print(f"{kind:8} push  {r['push_keys_per_s']:17,.0f} {r['dict_push_keys_per_s']:12,.0f} "
              f"{r['push_ratio']:7.1f}x  {'>= 5M/s and >= 8x' if kind == 'uniform' else ''}")
    r = res["uniform"]
    print(f"bytes per row: {r['bytes_per_row']:.1f} (payload {PAYLOAD}; {r['bytes_per_row'] / PAYLOAD:.2f}x, "
          "target <= 1.5x)")
    print(f"base save: {r['save_mb_per_s']:.0f} MB/s, load: {r['load_mb_per_s']:.0f} MB/s of {r['save_mb']:.0f} MB "
          "(target >= 500 MB/s, fsync included)")
    print(f"10k-key push latency during a base save of {args.rows / 1e6:.0f}M rows: p99 "
          f"{r['push_p99_ms_during_save']:.1f} ms, max {r['push_max_ms_during_save']:.1f} ms (without a save: p99 "
          f"{r['push_p99_ms_without_save']:.1f} ms, max {r['push_max_ms_without_save']:.1f} ms)")
    print(f"baseline: plain write + fsync of the same bytes: {r['raw_write_mb_per_s']:.0f} MB/s "
          f"(save is {r['save_mb_per_s'] / r['raw_write_mb_per_s']:.2f}x of the device's sequential write)")
    if budget:
        print_budget(budget)
    return 0


if __name__ == "__main__":
    sys.exit(main())
