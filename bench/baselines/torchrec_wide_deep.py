"""TorchRec baseline for bench/train.py: the same wide&deep, one pass over the same Criteo TSV
train file, AUC on the same test file, under DistributedModelParallel on CPU (gloo). Prints one
JSON object.

Runs in its own virtualenv (``make bench-torchrec`` creates ``.venv-torchrec`` with torchrec,
torch, fbgemm-gpu-cpu and pandas); it imports nothing from streamrec, so it is never a test
dependency.

Model (what streamrec's ``wide_deep`` computes): 26 slots, each id hashed with its slot into ONE
shared table of ``--buckets`` rows (the TensorFlow baseline's layout), an EmbeddingBagCollection
with one feature per slot (sum pooling; a missing value is an empty bag). A streamrec row is
``[wide weight, dim-9 embedding]`` = 10 floats; fbgemm's CPU kernels need a width divisible by 4,
so a TorchRec row is 12 floats: column 0 the wide weight, columns 1..9 the embedding, 2 columns
never read (their gradient is 0). The logit is the sum of the wide weights plus an MLP
400-400-400 ReLU (Glorot uniform, zero bias, as streamrec and the TF baseline) over the
concatenated embeddings and the 13 ``log1p(max(x, 0))`` dense inputs; sigmoid BCE, mean over the
batch of 512 per rank.

Optimizers: the table by fbgemm's fused EXACT_ROWWISE_ADAGRAD (``apply_optimizer_in_backward``
with ``torchrec.optim.RowWiseAdagrad``: updated inside backward, one accumulator per row = the
mean of the row's squared gradient, so the 2 unused columns dilute it by 10/12); the MLP by
``torch.optim.Adam`` (lr 1e-3), data parallel (DMP wraps it in DDP over gloo for 2+ ranks).

Ranks: ``--ranks R`` starts R processes (torch at 1 intra-op thread each: on 2 busy cores 2
threads ran 5-20x slower); rank r trains on blocks r, r+R, ... of ``--batch-size`` lines (as
streamrec's workers do), each step is synchronous across ranks (the table's all-to-all and
DDP's all-reduce); a rank without a block in the last round steps on one zero-weight row. With
R >= 2 the planner places the table (table_wise on one rank: CPU offers no row_wise) and every
rank's ids reach it by all-to-all. Data loading: each rank reads its blocks'
lines and parses them with pandas (C parser; ids hashed by ``pandas.util.hash_array``) in
chunks of 16 blocks. ``samples_per_s`` counts that loading; ``loop_samples_per_s`` only the
training steps (KJT build, forward, backward, optimizer).

Run: ``.venv-torchrec/bin/python bench/baselines/torchrec_wide_deep.py --train T --test T --ranks 2``.
"""

from __future__ import annotations

import argparse
import io
import itertools
import json
import os
import resource
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from rank_auc import roc_auc  # beside this script: the baseline venvs lack streamrec

N_DENSE, N_SPARSE = 13, 26
SLOTS = [f"C{s + 1}" for s in range(N_SPARSE)]
WIDTH_MULTIPLE = 4  # fbgemm's CPU table batched embedding kernels
CHUNK_BLOCKS = 16


def row_width(dim: int) -> int:
    """The table width: wide weight + embedding, rounded up to fbgemm's multiple of 4."""
    return -(-(1 + dim) // WIDTH_MULTIPLE) * WIDTH_MULTIPLE


def my_blocks(path: str, batch: int, rank: int, ranks: int) -> Iterator[list[bytes] | None]:
    """Rank ``rank``'s blocks of ``batch`` lines, round by round: None where the round has no block for it."""
    with open(path, "rb") as f:
        while True:
            round_lines = list(itertools.islice(f, batch * ranks))
            if not round_lines:
                return
            mine = round_lines[rank * batch : (rank + 1) * batch]
            yield mine or None


def parse(lines: list[bytes], buckets: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """TSV lines -> labels float32[n], dense float32[n, 13], ids int64[n, 26] (bucket), present bool[n, 26]."""
    import pandas as pd

    names = ["label", *[f"I{i}" for i in range(N_DENSE)], *SLOTS]
    df = pd.read_csv(io.BytesIO(b"".join(lines)), sep="\t", header=None, names=names, quoting=3,
                     dtype={**{c: np.float32 for c in names[: 1 + N_DENSE]}, **{c: object for c in SLOTS}},
                     na_filter=True, keep_default_na=False, na_values=[""])
    labels = df["label"].to_numpy(np.float32)
    dense = np.log1p(np.maximum(np.nan_to_num(df[names[1 : 1 + N_DENSE]].to_numpy(np.float32)), 0.0))
    n = labels.shape[0]
    ids = np.zeros((n, N_SPARSE), np.int64)
    present = np.zeros((n, N_SPARSE), np.bool_)
    for s, c in enumerate(SLOTS):
        col = df[c]
        mask = col.notna().to_numpy()
        present[:, s] = mask
        if mask.any():
            vals = col.to_numpy()[mask].astype(str)
            h = pd.util.hash_array(vals, hash_key=f"slot{s:012d}"[:16])  # the slot is part of the key
            ids[mask, s] = (h % np.uint64(buckets)).astype(np.int64)
    return labels, dense.astype(np.float32), ids, present


def chunks(path: str, batch: int, rank: int, ranks: int, buckets: int) -> Iterator[tuple | None]:
    """Parsed batches of this rank, one per round (None: no block this round), parsed CHUNK_BLOCKS at a time."""
    blocks = my_blocks(path, batch, rank, ranks)
    while True:
        group = list(itertools.islice(blocks, CHUNK_BLOCKS))
        if not group:
            return
        real = [b for b in group if b is not None]
        parsed = parse([line for b in real for line in b], buckets) if real else None
        start = 0
        for b in group:
            if b is None:
                yield None
                continue
            end = start + len(b)
            assert parsed is not None
            yield tuple(a[start:end] for a in parsed)
            start = end


def rounds(path: str, batch: int, ranks: int) -> int:
    with open(path, "rb") as f:
        lines = sum(1 for _ in f)
    return -(-lines // (batch * ranks))


def run_rank(args: argparse.Namespace) -> dict:
    import torch
    import torch.distributed as dist
    from torch import nn
    from torchrec import EmbeddingBagCollection, EmbeddingBagConfig, KeyedJaggedTensor, PoolingType
    from torchrec.distributed.model_parallel import DistributedModelParallel
    from torchrec.distributed.planner import EmbeddingShardingPlanner, Topology
    from torchrec.optim.apply_optimizer_in_backward import apply_optimizer_in_backward
    from torchrec.optim.keyed import KeyedOptimizerWrapper
    from torchrec.optim.optimizers import in_backward_optimizer_filter
    from torchrec.optim.rowwise_adagrad import RowWiseAdagrad

    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    dist.init_process_group("gloo", rank=args.rank, world_size=args.ranks)
    width, dim = row_width(args.dim), args.dim

    class WideDeep(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ebc = EmbeddingBagCollection(tables=[EmbeddingBagConfig(
                name="table", embedding_dim=width, num_embeddings=args.buckets, feature_names=SLOTS,
                pooling=PoolingType.SUM, weight_init_min=-args.init_scale, weight_init_max=args.init_scale)],
                device=torch.device("meta"))
            sizes = [N_SPARSE * dim + N_DENSE, *[int(h) for h in args.mlp.split(",")], 1]
            layers: list[nn.Module] = []
            for i, (a, b) in enumerate(itertools.pairwise(sizes)):
                lin = nn.Linear(a, b)
                nn.init.xavier_uniform_(lin.weight)
                nn.init.zeros_(lin.bias)
                layers.append(lin)
                if i < len(sizes) - 2:
                    layers.append(nn.ReLU())
            self.mlp = nn.Sequential(*layers)

        def forward(self, dense: torch.Tensor, kjt: KeyedJaggedTensor) -> torch.Tensor:
            pooled = self.ebc(kjt).values().view(-1, N_SPARSE, width)
            x = torch.cat([pooled[:, :, 1 : 1 + dim].reshape(-1, N_SPARSE * dim), dense], dim=1)
            return self.mlp(x).squeeze(1) + pooled[:, :, 0].sum(dim=1)

    model = WideDeep()
    apply_optimizer_in_backward(RowWiseAdagrad, model.ebc.parameters(), {"lr": args.sparse_lr, "eps": args.eps})
    # the planner's choice: on CPU it allows data_parallel, table_wise and column-wise shardings (no
    # row_wise); for one table of 2^23 rows it places the table whole on one rank (table_wise)
    planner = EmbeddingShardingPlanner(topology=Topology(world_size=args.ranks, compute_device="cpu"))
    plan = planner.collective_plan(model, None, dist.GroupMember.WORLD)
    dmp = DistributedModelParallel(module=model, device=torch.device("cpu"), plan=plan)
    dense_opt = KeyedOptimizerWrapper(dict(in_backward_optimizer_filter(dmp.named_parameters())),
                                      lambda params: torch.optim.Adam(params, lr=args.lr))
    loss_fn = nn.BCEWithLogitsLoss(reduction="none")

    def kjt_of(ids: np.ndarray, present: np.ndarray) -> KeyedJaggedTensor:
        # feature-major: the lengths of C1 for every record, then C2, ...
        lengths = torch.from_numpy(present.T.astype(np.int32).reshape(-1))
        values = torch.from_numpy(np.ascontiguousarray(ids.T[present.T]))
        return KeyedJaggedTensor.from_lengths_sync(keys=SLOTS, values=values, lengths=lengths)

    empty = (np.zeros(1, np.float32), np.zeros((1, N_DENSE), np.float32), np.zeros((1, N_SPARSE), np.int64),
             np.zeros((1, N_SPARSE), np.bool_))
    n_rounds = rounds(args.train, args.batch_size, args.ranks)
    dmp.train()
    rows, loop_s = 0, 0.0
    source = chunks(args.train, args.batch_size, args.rank, args.ranks, args.buckets)
    dist.barrier()
    start, cpu0 = time.perf_counter(), time.process_time()
    for _ in range(n_rounds):
        got = next(source, None)
        weight = 1.0 if got is not None else 0.0
        labels, dense, ids, present = got if got is not None else empty
        t = time.perf_counter()
        z = dmp(torch.from_numpy(dense), kjt_of(ids, present))
        loss = (loss_fn(z, torch.from_numpy(labels.copy())) * weight).mean()
        loss.backward()  # the table's fused rowwise Adagrad runs here
        dense_opt.step()
        dense_opt.zero_grad()
        loop_s += time.perf_counter() - t
        rows += int(labels.shape[0]) if got is not None else 0
    seconds, cpu_s = time.perf_counter() - start, time.process_time() - cpu0

    dmp.eval()
    scores, ys = [], []
    test = chunks(args.test, args.batch_size * 4, args.rank, args.ranks, args.buckets)
    with torch.no_grad():
        for _ in range(rounds(args.test, args.batch_size * 4, args.ranks)):
            got = next(test, None)
            labels, dense, ids, present = got if got is not None else empty
            p = torch.sigmoid(dmp(torch.from_numpy(dense), kjt_of(ids, present))).numpy()
            if got is not None:
                scores.append(p.astype(np.float64))
                ys.append(labels)
    out = {"rank": args.rank, "rows": rows, "seconds": seconds, "loop_seconds": loop_s, "cpu_s": cpu_s,
           "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
           "labels": np.concatenate(ys).tolist() if ys else [],
           "scores": np.concatenate(scores).tolist() if scores else [],
           "torch": torch.__version__, "sharding": str(plan.plan.get("ebc", {}).get("table", ""))[:200]}
    dist.barrier()
    dist.destroy_process_group()
    return out



def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(args: argparse.Namespace, argv: list[str]) -> dict:
    """Start the ranks as processes (1 intra-op thread each), gather their results."""
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "OMP_NUM_THREADS": "1",
           "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    with tempfile.TemporaryDirectory(prefix="torchrec-bench-") as tmp:
        outs = [Path(tmp) / f"rank-{r}.json" for r in range(args.ranks)]
        procs = [subprocess.Popen([sys.executable, __file__, *argv, "--rank", str(r), "--out", str(outs[r])], env=env)
                 for r in range(args.ranks)]
        codes = [p.wait() for p in procs]
        if any(codes):
            raise SystemExit(f"torchrec ranks failed: exit codes {codes}")
        ranks = [json.loads(o.read_text()) for o in outs]
    y = np.concatenate([np.asarray(r["labels"], np.float32) for r in ranks])
    p = np.concatenate([np.asarray(r["scores"], np.float64) for r in ranks])
    pc = np.clip(p, 1e-7, 1 - 1e-7)
    rows = sum(r["rows"] for r in ranks)
    seconds = max(r["seconds"] for r in ranks)
    loop = max(r["loop_seconds"] for r in ranks)
    return {"framework": f"torchrec (torch {ranks[0]['torch']})", "strategy": f"dmp-{args.ranks}",
            "workers": args.ranks, "ranks": args.ranks, "train_rows": rows, "train_seconds": round(seconds, 3),
            "samples_per_s": round(rows / seconds, 1), "loop_seconds": round(loop, 3),
            "loop_samples_per_s": round(rows / loop, 1), "train_cpu_s": round(sum(r["cpu_s"] for r in ranks), 2),
            "test_rows": int(y.shape[0]), "test_auc": roc_auc(y, p),
            "test_logloss": float(-(y * np.log(pc) + (1 - y) * np.log1p(-pc)).mean()),
            "peak_rss_mb": round(sum(r["peak_rss_mb"] for r in ranks)
                                 + resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
            "sparse_optimizer": "fused exact rowwise adagrad", "sparse_lr": args.sparse_lr, "adagrad_init_acc": None,
            "dense_optimizer": f"adam {args.lr}", "buckets": args.buckets, "row_width": row_width(args.dim),
            "init_scale": args.init_scale, "sharding": ranks[0]["sharding"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--train", required=True)
    ap.add_argument("--test", required=True)
    ap.add_argument("--dim", type=int, default=9)
    ap.add_argument("--mlp", default="400,400,400")
    ap.add_argument("--batch-size", type=int, default=512)
    ap.add_argument("--lr", type=float, default=1e-3, help="dense Adam learning rate")
    # on bench/train.py's planted data (200k train rows, 1 rank): test AUC 0.6970 at 0.01, 0.6942 at 0.02,
    # 0.6783 at 0.05, 0.6439 at 0.15 (the accumulator is shared by the row's wide weight and embedding)
    ap.add_argument("--sparse-lr", type=float, default=0.01, help="rowwise Adagrad learning rate")
    ap.add_argument("--eps", type=float, default=1e-8)
    ap.add_argument("--init-scale", type=float, default=0.01, help="table init uniform [-s, s] (streamrec's)")
    ap.add_argument("--buckets", type=int, default=1 << 23)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args, _ = ap.parse_known_args()
    if args.rank is not None:
        Path(args.out).write_text(json.dumps(run_rank(args)))
        return 0
    print(json.dumps(launch(args, sys.argv[1:])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
