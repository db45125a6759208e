"""Training with tables larger than their RAM budget: the same model on long-tailed ids trained
three ways in one run: all in RAM, with a disk tier under a RAM budget a quarter of what the
all-RAM table holds, and evicting (RAM only) at that same budget.

Data: ``--fields`` fields, each id drawn Zipf(1.1) over ``--ids`` ids of its field (a long tail:
most ids are seen a few times), each id with a hidden weight N(0, 1); a label is Bernoulli of the
sigmoid of the sum of its ids' weights (minus a bias, so about a quarter are clicks). Training
rows come first, test rows after them, from the same distribution. Model: the logit is the sum
over fields of each id's embedding summed over its ``DIM`` columns (a logistic regression whose
weight per id lives in a table row with Adam state: the table is the whole step, the tier's
hardest case), plus, with ``--mlp`` (e.g. ``400,400,400``, bench/train.py's), an MLP over the
concatenated embeddings (wide & deep; its dense Adam, lr 1e-3, runs in the step, as a worker's
does); batches of ``--batch`` rows, one pass;
pushes carry shows and clicks, so eviction scores by them. Test AUC reads rows without moving
them (``pull_existing``: an evicted id reads as zeros, as a never-seen one). Each run is a process
of its own, and the three take their batches in turn (``in_lockstep``: batch i of each before
batch i+1 of any), so drift on a shared machine falls alike on all three; samples/s counts the
pulls, the model and the pushes of each batch, by wall time and by the training thread's CPU
time (steadier on a loaded machine). The RAM budget is a quarter of what the all-RAM table holds
once it has every training id, measured first by a fill in a process of its own.
Run: ``python -m bench.tables --tiered --train [--train-rows N] [--mlp 400,400,400] [--json]``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.baselines.rank_auc import roc_auc
from bench.table_streams import frozen_heap
from models.layers import MLP, ParamSet
from tables.dense_optimizer import DenseOptimizer
from tables.sparse_table import SparseTable
from tables.table_config import DiskTierConfig, EvictionConfig, OptimizerConfig, TableConfig, TierConfig

DIM = 8
SEED = 11
WARM_ROWS = 20_000  # rows of the warm-up run before the measured one
WARM_BUDGET = 1 << 16  # its RAM budget: small enough to demote and promote


def draw(rows: int, fields: int, ids: int, rng: np.random.Generator,
         weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(keys (rows, fields) uint64, labels) of the planted model."""
    ranks = np.minimum(rng.zipf(1.1, (rows, fields)), ids) - 1
    ids_of = np.arange(fields, dtype=np.uint64) * np.uint64(ids) + ranks.astype(np.uint64)
    keys = ids_of * np.uint64(0x9E3779B97F4A7C15)
    logit = weights[np.arange(fields) * ids + ranks].sum(axis=1) - 1.5
    labels = (rng.random(rows) < 1.0 / (1.0 + np.exp(-logit))).astype(np.float32)
    return keys, labels


def data(train_rows: int, test_rows: int, fields: int, ids: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(SEED)
    weights = rng.standard_normal(fields * ids).astype(np.float32)
    train_keys, train_labels = draw(train_rows, fields, ids, rng, weights)
    test_keys, test_labels = draw(test_rows, fields, ids, rng, weights)
    return {"train_keys": train_keys, "train_labels": train_labels, "test_keys": test_keys, "test_labels": test_labels}


def tier_config(tier_dir: str | None, low_water: float | None) -> TierConfig | None:
    """A disk tier in ``tier_dir`` (None: no tier) with ``low_water`` (None: the default)."""
    if tier_dir is None:
        return None
    return TierConfig(disk=DiskTierConfig(path=tier_dir), **({"low_water": low_water} if low_water is not None else {}))


def low_water_of(low_water: float | None) -> float:
    """The low water a tier of :func:`tier_config` has."""
    return TierConfig.model_fields["low_water"].default if low_water is None else low_water


def table_config(ram_bytes: int | None, tier_dir: str | None, low_water: float | None = None) -> TableConfig:
    return TableConfig(name="train", dim=DIM, optimizer=OptimizerConfig(kind="adam", lr=0.02),
                       eviction=EvictionConfig(max_bytes=ram_bytes), tier=tier_config(tier_dir, low_water))


def all_ram_bytes(train_rows: int, fields: int, ids: int, batch: int) -> int:
    """What the all-RAM table holds once it has a row for every training id (the others'
    RAM budget is a quarter of it)."""
    keys = np.unique(data(train_rows, 0, fields, ids)["train_keys"])
    table = SparseTable(table_config(None, None))
    step = batch * fields
    for s in range(0, keys.shape[0], step):
        k = keys[s : s + step]
        table.push(k, np.zeros((k.shape[0], DIM), np.float32))
    return int(table.stats()["bytes"])


class Deep:
    """The MLP of the wide & deep variant: the concatenated embeddings in, one logit out, its
    parameters updated by Adam after each batch."""

    def __init__(self, fields: int, hidden: tuple[int, ...]) -> None:
        self.net = MLP("deep", [fields * DIM, *hidden, 1])
        self.params = ParamSet(self.net.specs())
        self.net.init(self.params, np.random.default_rng(SEED))
        self.opt = DenseOptimizer(OptimizerConfig(kind="adam", lr=1e-3), self.params.values)

    def logits(self, rows: np.ndarray, *, train: bool) -> np.ndarray:
        return self.net.forward(self.params, rows.reshape(rows.shape[0], -1), reuse=train)[:, 0]

    def step(self, dlogits: np.ndarray) -> np.ndarray:
        """Backward from the last training forward and one Adam step; the embeddings' gradient."""
        dx = self.net.backward(self.params, dlogits[:, None])
        self.opt.step(self.params.values, self.params.grads)
        return dx


def train_run(train_rows: int, test_rows: int, fields: int, ids: int, batch: int, ram_bytes: int | None,
              tier_dir: str | None, low_water: float | None = None, mlp: tuple[int, ...] = (), gate: Any = None,
              *, warm: bool = True) -> dict[str, Any]:
    """In a process of its own: one pass over the training rows, then the test AUC.
    ``mlp``: the hidden sizes of the deep part (none: the logistic model alone).
    ``gate``: called before each batch, waits for this process's turn (``in_lockstep``).
    ``warm``: first a short run at a tiny budget (demotions, promotions), so the kernels are
    compiled or loaded before the clock runs: a cold numba cache would time the compiler."""
    if warm:
        train_run(WARM_ROWS, WARM_ROWS // 10, fields, WARM_ROWS // 20, min(batch, WARM_ROWS // 20),
                  None if ram_bytes is None else WARM_BUDGET, tier_dir, low_water, mlp, warm=False)
    d = data(train_rows, test_rows, fields, ids)
    table = SparseTable(table_config(ram_bytes, tier_dir, low_water))
    deep = Deep(fields, mlp) if mlp else None
    keys, labels = d["train_keys"], d["train_labels"]
    secs = cpu_secs = 0.0
    with frozen_heap():
        for s in range(0, train_rows, batch):
            if gate is not None:
                gate()
            t, cpu = time.perf_counter(), time.thread_time()
            k = keys[s : s + batch].ravel()
            y = labels[s : s + batch]
            rows = table.pull(k).reshape(y.shape[0], fields, DIM)
            z = rows.sum(axis=(1, 2))
            if deep is not None:
                z = z + deep.logits(rows, train=True)
            p = 1.0 / (1.0 + np.exp(-z))
            dz = ((p - y) / y.shape[0]).astype(np.float32)
            g = np.repeat(dz, fields * DIM).reshape(-1, DIM)
            if deep is not None:
                g += deep.step(dz).reshape(-1, DIM)
            table.push(k, g, np.ones(k.shape[0], np.float32), np.repeat(y, fields))
            secs += time.perf_counter() - t
            cpu_secs += time.thread_time() - cpu
    test_k = d["test_keys"]
    rows, _ = table.pull_existing(test_k.ravel())
    rows = rows.reshape(test_k.shape[0], fields, DIM)
    scores = rows.sum(axis=(1, 2))
    if deep is not None:
        scores = scores + deep.logits(rows, train=False)
    st = table.stats()
    return {"samples_per_s": train_rows / secs, "samples_per_cpu_s": train_rows / cpu_secs,
            "auc": roc_auc(d["test_labels"], scores), "rows": table.size(),
            "ram_rows": st["rows"], "disk_rows": st.get("disk_rows", 0), "evicted": st["evicted_by_budget"],
            "table_bytes": st["bytes"] + st.get("disk_index_bytes", 0), "promoted": st.get("promoted", 0)}


def run(train_rows: int, test_rows: int, fields: int, ids: int, batch: int, workdir: Path,
        in_process: Any, in_lockstep: Any, low_water: float | None = None, mlp: tuple[int, ...] = ()) -> dict[str, Any]:
    """``in_process(fn, *args)``: ``fn(*args)`` in a process of its own; ``in_lockstep(fn, *runs)``:
    ``fn(*args, gate=...)`` for each argument tuple, in processes taking their batches in turn."""
    args = (train_rows, test_rows, fields, ids, batch)
    budget = in_process(all_ram_bytes, train_rows, fields, ids, batch) // 4
    ram, tiered, evicting = in_lockstep(train_run, (*args, None, None, None, mlp),
                                        (*args, budget, str(workdir / "train-tier"), low_water, mlp),
                                        (*args, budget, None, None, mlp))
    return {"low_water": low_water_of(low_water), "mlp": list(mlp),
            "train_rows": train_rows, "test_rows": test_rows, "fields": fields, "ids_per_field": ids, "batch": batch,
            "ram_budget_bytes": budget, "all_ram": ram, "tiered": tiered, "evicting": evicting,
            "tiered_vs_all_ram_samples": tiered["samples_per_s"] / ram["samples_per_s"],
            "tiered_vs_all_ram_samples_cpu": tiered["samples_per_cpu_s"] / ram["samples_per_cpu_s"],
            "tiered_minus_all_ram_auc": tiered["auc"] - ram["auc"],
            "tiered_minus_evicting_auc": tiered["auc"] - evicting["auc"]}


def report(r: dict[str, Any]) -> None:
    model = f"wide & deep, MLP {','.join(map(str, r['mlp']))}" if r.get("mlp") else "logistic (the table alone)"
    print(f"training: {r['train_rows']:,} rows x {r['fields']} fields (Zipf(1.1) over {r['ids_per_field']:,} ids "
          f"each), {model}, batch {r['batch']}, dim {DIM} Adam, {r['test_rows']:,} test rows; RAM budget "
          f"{r['ram_budget_bytes'] / 1e6:.0f} MB = a quarter of the all-RAM table's "
          f"{r['all_ram']['table_bytes'] / 1e6:.0f} MB, tier low_water {r['low_water']}; the three runs take their "
          f"batches in turn")
    print(f"{'run':10} {'samples/s':>10} {'test AUC':>9} {'rows':>10} {'in RAM':>10} {'on disk':>10} {'evicted':>9}")
    for name in ("all_ram", "tiered", "evicting"):
        x = r[name]
        print(f"{name:10} {x['samples_per_s']:10,.0f} {x['auc']:9.4f} {x['rows']:10,} {x['ram_rows']:10,} "
              f"{x['disk_rows']:10,} {x['evicted']:9,}")
    print(f"tiered/all-RAM samples/s {r['tiered_vs_all_ram_samples']:.2f}x (target >= 0.7x), by the training "
          f"thread's CPU time {r['tiered_vs_all_ram_samples_cpu']:.2f}x; test AUC tiered - all-RAM "
          f"{r['tiered_minus_all_ram_auc']:+.4f} (target within 0.001), tiered - evicting "
          f"{r['tiered_minus_evicting_auc']:+.4f} (target > 0)")
