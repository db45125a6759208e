"""TensorFlow baseline for bench/train.py: the same wide&deep, one pass over the same Criteo
TSV train file, AUC on the same test file. Prints one JSON object.

Runs in its own virtualenv (``make bench-baselines`` creates ``.venv-baselines`` with
tensorflow-cpu); it imports nothing from streamrec, so it never becomes a test dependency.

Model (what streamrec's ``wide_deep`` computes): 26 slots, each id hashed with its slot
name into ONE shared table of ``--buckets`` rows of ``[wide weight, dim-9 embedding]`` (a
missing value contributes nothing); the logit is the sum of the wide weights plus an MLP
400-400-400 ReLU over the concatenated embeddings and the 13 ``log1p(max(x, 0))`` dense
inputs; sigmoid BCE, mean over the batch of 512.

Optimizers, exactly (TensorFlow's own kernels through ``tf.raw_ops``):
  dense (MLP): Adam lr 1e-3, beta1 0.9, beta2 0.999, eps 1e-7 (``ResourceApplyAdam``);
  sparse (embedding table and wide weights), ``--sparse-optimizer``:
    adagrad    ``ResourceSparseApplyAdagradV2`` (the default): per-element accumulator
               starting at ``--adagrad-init-acc`` (1e-7), lr ``--sparse-lr`` (0.02), eps
               1e-7, only the batch's rows touched;
    lazy_adam  Adam lr ``--sparse-lr`` on the batch's rows only (scatter ops; the rule of
               tf-addons' LazyAdam; per-row moments, a global step for bias correction).
Dense Adam over the whole table (Keras' Adam on an embedding) rewrites every row every step,
so it is not offered: at 2^23 rows it is two orders of magnitude slower.

Input: ``tf.data`` reads and parses the text (``decode_csv``) in a parallel map, so the
samples/s include parsing, as streamrec's do. ``--strategy ps`` runs the same step under
``tf.distribute.ParameterServerStrategy`` with in-process servers (1 ps, ``--workers``
workers, a coordinator), the setting the issue quotes: the coordinator reads each batch's
lines and schedules the step on a free worker, which parses them (asynchronous training).

Run: ``.venv-baselines/bin/python bench/baselines/tf_wide_deep.py --train T --test T``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import resource
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
from rank_auc import roc_auc  # beside this script: the baseline venvs lack streamrec

N_DENSE, N_SPARSE = 13, 26
_SERVERS: list[tf.distribute.Server] = []  # the in-process cluster's servers, alive until exit


def parse_lines(lines: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor, tf.Tensor]:
    """A batch of TSV lines -> labels float[n], dense float[n, 13], bucket ids int64[n, 26], mask float[n, 26]."""
    defaults = [[0.0]] * (1 + N_DENSE) + [[""]] * N_SPARSE
    cols = tf.io.decode_csv(lines, defaults, field_delim="\t", na_value="")
    label = cols[0]
    dense = tf.math.log1p(tf.maximum(tf.stack(cols[1 : 1 + N_DENSE], axis=1), 0.0))
    raw = tf.stack(cols[1 + N_DENSE :], axis=1)
    mask = tf.cast(tf.strings.length(raw) > 0, tf.float32)
    slot = tf.constant([[f"C{s + 1}:" for s in range(N_SPARSE)]])
    return label, dense, tf.strings.join([tf.broadcast_to(slot, tf.shape(raw)), raw]), mask


def dataset(path: str, batch: int) -> tf.data.Dataset:
    ds = tf.data.TextLineDataset(path).batch(batch)
    return ds.map(parse_lines, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)


class WideDeep(tf.Module):
    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__()
        rng = np.random.default_rng(args.seed)
        self.buckets, self.dim = args.buckets, args.dim
        table = rng.uniform(-args.init_scale, args.init_scale, (args.buckets, 1 + args.dim)).astype(np.float32)
        table[:, 0] = 0.0  # wide weights start at zero
        self.table = tf.Variable(table, name="table")
        sizes = [N_SPARSE * args.dim + N_DENSE, *[int(h) for h in args.mlp.split(",")], 1]
        self.layers = []
        for i, (a, b) in enumerate(itertools.pairwise(sizes)):
            limit = np.sqrt(6.0 / (a + b))  # Glorot uniform, Keras' Dense default
            w = tf.Variable(rng.uniform(-limit, limit, (a, b)).astype(np.float32), name=f"w{i}")
            self.layers.append((w, tf.Variable(tf.zeros([b]), name=f"b{i}")))

    @property
    def dense_vars(self) -> list[tf.Variable]:
        return [v for pair in self.layers for v in pair]

    def ids(self, keys: tf.Tensor) -> tf.Tensor:
        return tf.strings.to_hash_bucket_fast(keys, self.buckets)

    def logits(self, dense: tf.Tensor, rows: tf.Tensor, mask: tf.Tensor) -> tf.Tensor:
        """``rows`` float[n, 26, 1 + dim]: the gathered table rows of the batch's ids."""
        rows = rows * mask[:, :, None]
        x = tf.concat([tf.reshape(rows[:, :, 1:], [-1, N_SPARSE * self.dim]), dense], axis=1)
        for i, (w, b) in enumerate(self.layers):
            x = tf.matmul(x, w) + b
            if i < len(self.layers) - 1:
                x = tf.nn.relu(x)
        return x[:, 0] + tf.reduce_sum(rows[:, :, 0], axis=1)


class Trainer(tf.Module):
    def __init__(self, model: WideDeep, args: argparse.Namespace) -> None:
        super().__init__()
        self.model, self.args = model, args
        self.step = tf.Variable(0.0, name="step")
        self.m = [tf.Variable(tf.zeros_like(v)) for v in model.dense_vars]
        self.v = [tf.Variable(tf.zeros_like(v)) for v in model.dense_vars]
        shape = model.table.shape
        if args.sparse_optimizer == "adagrad":
            self.acc = tf.Variable(tf.fill(shape, np.float32(args.adagrad_init_acc)), name="acc")
        else:
            self.sm = tf.Variable(tf.zeros(shape), name="sm")
            self.sv = tf.Variable(tf.zeros(shape), name="sv")

    def train_step(self, label: tf.Tensor, dense: tf.Tensor, keys: tf.Tensor, mask: tf.Tensor) -> tf.Tensor:
        model, args = self.model, self.args
        ids = model.ids(keys)
        uniq, where = tf.unique(tf.reshape(ids, [-1]))
        with tf.GradientTape() as tape:
            urows = tf.gather(model.table, uniq)  # watched: gradients w.r.t. the unique rows only
            tape.watch(urows)
            rows = tf.reshape(tf.gather(urows, where), [-1, N_SPARSE, 1 + model.dim])
            z = model.logits(dense, rows, mask)
            loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=label, logits=z))
        grads = tape.gradient(loss, [urows, *model.dense_vars])
        self.step.assign_add(1.0)
        t = self.step
        b1, b2 = np.float32(0.9), np.float32(0.999)
        p1, p2 = tf.pow(b1, t), tf.pow(b2, t)
        for var, m, v, g in zip(model.dense_vars, self.m, self.v, grads[1:], strict=True):
            tf.raw_ops.ResourceApplyAdam(var=var.handle, m=m.handle, v=v.handle, beta1_power=p1, beta2_power=p2,
                                         lr=np.float32(args.lr), beta1=b1, beta2=b2, epsilon=np.float32(1e-7),
                                         grad=g)
        g = tf.convert_to_tensor(grads[0])  # [unique ids, 1 + dim]: summed over the ids' occurrences
        if args.sparse_optimizer == "adagrad":
            tf.raw_ops.ResourceSparseApplyAdagradV2(var=model.table.handle, accum=self.acc.handle,
                                                    lr=np.float32(args.sparse_lr), epsilon=np.float32(1e-7),
                                                    grad=g, indices=uniq)
        else:  # lazy Adam: moments and weights of the touched rows only
            m = b1 * tf.gather(self.sm, uniq) + (1 - b1) * g
            v = b2 * tf.gather(self.sv, uniq) + (1 - b2) * g * g
            self.sm.scatter_nd_update(uniq[:, None], m)
            self.sv.scatter_nd_update(uniq[:, None], v)
            lr_t = np.float32(args.sparse_lr) * tf.sqrt(1 - p2) / (1 - p1)
            model.table.scatter_nd_sub(uniq[:, None], lr_t * m / (tf.sqrt(v) + np.float32(1e-7)))
        return loss

    def score(self, dense: tf.Tensor, keys: tf.Tensor, mask: tf.Tensor) -> tf.Tensor:
        rows = tf.gather(self.model.table, self.model.ids(keys))
        return tf.sigmoid(self.model.logits(dense, rows, mask))



def evaluate(trainer: Trainer, path: str) -> tuple[float, float, int]:
    score = tf.function(trainer.score)
    ys, ps = [], []
    for label, dense, keys, mask in dataset(path, 4096):
        ys.append(label.numpy())
        ps.append(score(dense, keys, mask).numpy())
    y, p = np.concatenate(ys), np.concatenate(ps).astype(np.float64)
    pc = np.clip(p, 1e-7, 1 - 1e-7)
    return roc_auc(y, p), float(-(y * np.log(pc) + (1 - y) * np.log1p(-pc)).mean()), int(y.shape[0])


def train_local(trainer: Trainer, args: argparse.Namespace) -> int:
    step = tf.function(trainer.train_step)
    rows = 0
    for label, dense, keys, mask in dataset(args.train, args.batch_size):
        step(label, dense, keys, mask)
        rows += int(label.shape[0])
    return rows


def in_process_cluster(workers: int) -> tf.distribute.cluster_resolver.ClusterResolver:
    """1 ps + ``workers`` workers as in-process gRPC servers on free loopback ports (TF's tutorial recipe)."""
    import socket

    def port() -> int:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]

    spec = {"worker": [f"127.0.0.1:{port()}" for _ in range(workers)], "ps": [f"127.0.0.1:{port()}"]}
    cluster = tf.train.ClusterSpec(spec)
    config = tf.compat.v1.ConfigProto()
    config.inter_op_parallelism_threads = max(workers + 1, os.cpu_count() or 1)  # fewer deadlocks the workers
    _SERVERS.extend(tf.distribute.Server(cluster, job_name="worker", task_index=i, protocol="grpc", config=config)
                    for i in range(workers))
    _SERVERS.append(tf.distribute.Server(cluster, job_name="ps", task_index=0, protocol="grpc"))
    return tf.distribute.cluster_resolver.SimpleClusterResolver(cluster, rpc_layer="grpc")


def train_ps(args: argparse.Namespace) -> tuple[Trainer, int, float, float]:
    strategy = tf.distribute.ParameterServerStrategy(in_process_cluster(args.workers))
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    with strategy.scope():
        trainer = Trainer(WideDeep(args), args)

    # The coordinator hands each batch's raw lines to whichever worker is free and the worker parses them:
    # exactly one pass in file order. (Per-worker datasets would not do: under the coordinator the dataset
    # function is traced once, with one input pipeline, so every worker would read the whole file.)
    @tf.function
    def worker_step(lines: tf.Tensor) -> tf.Tensor:
        return strategy.run(lambda x: trainer.train_step(*parse_lines(x)), args=(lines,))

    rows = 0
    t, cpu0 = time.perf_counter(), _cpu_s()
    for lines in tf.data.TextLineDataset(args.train).batch(args.batch_size).prefetch(4):
        coordinator.schedule(worker_step, args=(lines,))
        rows += int(lines.shape[0])
    coordinator.join()
    return trainer, rows, time.perf_counter() - t, _cpu_s() - cpu0


def _cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--train", required=True)
    ap.add_argument("--test", required=True)
    ap.add_argument("--dim", type=int, default=9)
    ap.add_argument("--mlp", default="400,400,400")
    ap.add_argument("--batch-size", type=int, default=512)
    ap.add_argument("--lr", type=float, default=1e-3, help="dense Adam learning rate")
    ap.add_argument("--sparse-optimizer", choices=("adagrad", "lazy_adam"), default="adagrad")
    ap.add_argument("--sparse-lr", type=float, default=0.02)
    # Keras' default 0.1 is meant for gradients of order 1; a mean loss over 512 rows gives an id ~1/512 of
    # its example's gradient, and 0.1 then stalls the sparse weights (measured: test AUC 0.694 against 0.711)
    ap.add_argument("--adagrad-init-acc", type=float, default=1e-7)
    ap.add_argument("--init-scale", type=float, default=0.05, help="embedding init uniform [-s, s] (Keras' default)")
    ap.add_argument("--buckets", type=int, default=1 << 23)
    ap.add_argument("--strategy", choices=("local", "ps"), default="local")
    ap.add_argument("--workers", type=int, default=2, help="--strategy ps: worker servers")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    tf.random.set_seed(args.seed)
    # cpu_s: every thread of this process (the in-process servers' too) during the training loop
    if args.strategy == "ps":
        trainer, rows, seconds, cpu_s = train_ps(args)
    else:
        trainer = Trainer(WideDeep(args), args)
        t, cpu0 = time.perf_counter(), _cpu_s()
        rows = train_local(trainer, args)
        seconds, cpu_s = time.perf_counter() - t, _cpu_s() - cpu0
    auc, logloss, test_rows = evaluate(trainer, args.test)
    out = {"framework": f"tensorflow {tf.__version__}", "strategy": args.strategy,
           "workers": args.workers if args.strategy == "ps" else 1, "train_rows": rows,
           "train_seconds": round(seconds, 3), "samples_per_s": round(rows / seconds, 1), "test_rows": test_rows,
           "train_cpu_s": round(cpu_s, 2),
           "test_auc": auc, "test_logloss": logloss,
           "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
           "sparse_optimizer": args.sparse_optimizer, "sparse_lr": args.sparse_lr,
           "adagrad_init_acc": args.adagrad_init_acc if args.sparse_optimizer == "adagrad" else None,
           "dense_optimizer": f"adam {args.lr}", "buckets": args.buckets, "init_scale": args.init_scale}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
