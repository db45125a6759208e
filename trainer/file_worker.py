"""One worker process of ``streamrec train-files`` (started by the launcher with STREAMREC_* set).

Worker ``r`` of ``W`` trains on blocks ``r, r+W, r+2W, ...`` of ``batch_size`` lines of the
training files, in order, through the parameter server (async by default). Its result
(records, seconds, peak RSS, metrics) goes to ``<results>/worker-<r>.json``. Worker 0 then
waits for every worker at a PS barrier, evaluates the test file with the trained
parameters (forward only, in batches of ``EVAL_BATCH`` parsed and pulled ahead as training's
are), and writes ``<results>/result.json`` (plus the predictions file if asked). The dense
transforms are each worker's own (a standardized field's running statistics,
:mod:`models.dense_statistics`): the test set is scored with the chief's, which the result names.

Run as ``python -m trainer.file_worker SPEC.json``.
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from collections.abc import Generator
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from core.kernel_cache import load_runtime
from logrecords.batch import Batch
from logrecords.file_formats import FileReader
from logrecords.schema_config import SchemaConfig
from models import build_model
from models.layers import bias_relu
from ps.client import PSClient
from ps.cluster import ClusterSpec, cluster_from_env
from ps.staleness import summarize
from streaming.dead_letter import DeadLetters
from trainer.job_config import DEFAULT_DENSE_SYNC_STEPS, DenseUpdate
from trainer.params import PSStore, dense_rule
from trainer.prefetch import start_prefetch
from trainer.process_stats import peak_rss_mb, process_age_s, process_cpu_seconds, process_peak_rss_mb, rss_mb
from trainer.ps_worker import PSWorker
from trainer.worker import AUTO_PARTS, Prepared, Worker, check_dense_parts, dense_parts_for

_FINISH_STEP = 1 << 40  # barrier id after the last training step (never a real step number)
EVAL_BATCH = 2048  # records per test batch (forward only: larger ones took no less CPU per record, more memory)


def file_batches(paths: list[str], schema: SchemaConfig, batch_size: int, dead: DeadLetters, *, rank: int = 0,
                 workers: int = 1, absent: Counter[str] | None = None) -> Generator[Batch, None, int]:
    """This worker's share of the files' records, parsed; only its own blocks are parsed. Any format
    of :mod:`logrecords.file_formats` (by each file's extension, else the schema's). Adds to
    ``absent`` the records of its share lacking each required field (each file's share checked on
    its own). Returns the number of blocks of all workers."""
    reader = FileReader(schema)
    checks = {}
    k = 0
    for path in paths:
        for block in reader.blocks(Path(path), batch_size):
            k += 1
            if (k - 1) % workers != rank:
                continue
            batch, rejected, sources = block.parse()
            if block.check is not None:
                checks[id(block.check)] = block.check
            if rejected:
                dead.publish(rejected, sources)
            if len(batch):
                yield batch
    if absent is not None:
        for check in checks.values():
            absent.update(check.absent)
    return k


def job_schema(job: dict[str, Any]) -> SchemaConfig:
    """The record schema of the job spec (Criteo's when the spec names none)."""
    return SchemaConfig.model_validate(job["schema"]) if job.get("schema") else SchemaConfig.criteo()


def _client(spec: ClusterSpec, job: dict[str, Any]) -> PSClient:
    client = PSClient(spec.shard_endpoints, secret=spec.secret())
    _tag(client, spec, job)
    return client


def _tag(client: PSClient, spec: ClusterSpec, job: dict[str, Any]) -> None:
    """With the shards' staleness sampling on, a worker's pulls and pushes name its rank (ps.staleness)."""
    if job.get("staleness_sample"):
        client.set_tag(str(spec.rank))


def prepared_batches(spec: ClusterSpec, job: dict[str, Any], *, test: bool = False
                     ) -> Generator[Prepared, None, dict[str, Any]]:
    """The prefetch stage of this worker: its batches parsed, their features built and, in async
    mode, their rows pulled (own PS connection). Returns ``{"rejected": counts by reason, "blocks": of
    all workers, "cpu_s": {"parse", "features", "pull", "stage"}}``: this stage's thread CPU seconds by part
    (``stage``: all of it, hand-over included; the process's other threads, e.g. zmq's I/O, are
    not in it). Runs in the prefetch thread or process, so it builds what it needs from
    picklable arguments. ``test``: the test file's batches instead, all of them, ``EVAL_BATCH``
    records each."""
    model = build_model(job["model"])
    dead = DeadLetters()
    absent: Counter[str] = Counter()
    client = _client(spec, job) if spec.mode == "async" else None
    cpu = {"parse": 0.0, "features": 0.0, "pull": 0.0, "stage": 0.0}
    start = time.thread_time()
    try:
        source = (file_batches([job["test"]], job_schema(job), EVAL_BATCH, dead, absent=absent) if test else
                  file_batches(job["train"], job_schema(job), job["batch_size"], dead, rank=spec.rank,
                               workers=spec.num_workers, absent=absent))
        t0 = time.thread_time()
        while True:
            try:
                batch = next(source)
            except StopIteration as end:
                blocks = end.value
                break
            t1 = time.thread_time()
            f = model.features(batch)
            t2 = time.thread_time()
            # the features' keys have no repeats: the client and shard skip their dedupe passes
            rows = None if client is None else {t: client.wait(client.pull(t, ti.keys, unique=True))
                                                for t, ti in f.tables.items()}
            t3 = time.thread_time()
            cpu["parse"] += t1 - t0
            cpu["features"] += t2 - t1
            cpu["pull"] += t3 - t2
            yield Prepared(batch, f, rows)
            t0 = time.thread_time()
    finally:
        if client is not None:
            client.close()
    cpu["stage"] = time.thread_time() - start
    return {"rejected": dict(dead.counts), "absent_fields": dict(absent), "blocks": blocks, "cpu_s": cpu}


def blas_threads() -> int | None:
    """The threads numpy's BLAS runs in this process (as the library reports it: the launcher's
    limits are only environment variables), or None when threadpoolctl is not installed."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return None
    counts = [int(p["num_threads"]) for p in threadpool_info() if p.get("user_api") == "blas"]
    return max(counts) if counts else None


def load_numba_runtime() -> None:
    """Load numba's runtime now, at set-up and before the prefetch thread calls a kernel: a
    process's first call of any numba kernel, cached or not, loads numba's typing and lowering
    registries (:func:`core.kernel_cache.load_runtime`, which skips scipy.linalg). Left to the
    first batch, the training loop waited for it. One tiny call of a cached kernel, with the
    argument types the step uses, loads that kernel too."""
    load_runtime()
    y = np.zeros((1, 1), np.float32)
    bias_relu(y, np.zeros(1, np.float32))


def train(spec: ClusterSpec, job: dict[str, Any]) -> dict[str, Any]:
    load_numba_runtime()
    # started next: a prefetch process's start-up (imports) overlaps this worker's own set-up
    kind = job.get("prefetch", "process")
    batches = start_prefetch(kind, partial(prepared_batches, spec, job), depth=2)
    try:
        model = build_model(job["model"])
        ps = PSWorker.from_spec(spec)
        _tag(ps.client, spec, job)
        update = DenseUpdate(job.get("dense_update", DenseUpdate.LOCAL))
        parts = dense_parts_for(job.get("dense_parts", AUTO_PARTS), workers=spec.num_workers, mode=spec.mode,
                                model=model)
        check_dense_parts(parts, spec.mode)
        store = PSStore(ps, model.params.values, dense_rule=dense_rule(update, model.config.dense_optimizer))
        sync_steps = 1 if spec.mode == "sync" else job.get("dense_sync_steps", DEFAULT_DENSE_SYNC_STEPS)
        worker = Worker(model, store, dense_sync_steps=sync_steps,
                        dense_update=update, dense_parts=parts)
    except BaseException:
        batches.close()
        raise
    rss_before_data = rss_mb()  # the process's fixed cost: imports, kernels, model, connections
    shards = _shard_pids(ps) if spec.rank == 0 else []
    shard_cpu0 = [process_cpu_seconds(pid) for pid in shards]
    start, main_cpu, loop_cpu = time.perf_counter(), time.thread_time(), time.process_time()
    setup_cpu = loop_cpu  # start-up: the process's CPU (every thread's) before its training loop
    first: list[float] = []  # wall seconds to the first batch, and to the end of its step
    try:
        for p in batches:
            if not first:
                first.append(time.perf_counter() - start)
                worker.step(p)
                first.append(time.perf_counter() - start)
                first.append(process_age_s())
                continue
            worker.step(p)
    finally:
        batches.close()
    seconds = time.perf_counter() - start
    model.use_dense_statistics()  # the test set is scored, and the result named, with every value's statistics
    # the shards' CPU during this loop: their start-up (imports, numba's first call) and the
    # evaluation after it are not the training's
    shard_loop_cpu = [round(process_cpu_seconds(pid) - c, 3) for pid, c in zip(shards, shard_cpu0, strict=True)]
    # loop_cpu_s: this process's CPU during the loop (cpu_s adds its set-up: imports, kernels, model);
    # main_cpu_s: the loop's own thread of it, the rest is the prefetch stage's (thread prefetch)
    produced = batches.result or {}
    result = {"rank": spec.rank, "records": worker.records, "seconds": seconds,
              "rejected": produced.get("rejected", {}), "absent_fields": produced.get("absent_fields", {}),
              "prefetch_cpu_s": produced.get("cpu_s", {}),
              "first_batch_s": first[0] if first else None, "first_step_s": first[1] if len(first) > 1 else None,
              "start_to_first_step_s": first[2] if len(first) > 2 else None, "setup_cpu_s": setup_cpu,
              "cpu_s": time.process_time() + batches.stats.get("cpu_s", 0.0), "prefetch": kind,
              "loop_cpu_s": time.process_time() - loop_cpu, "main_cpu_s": time.thread_time() - main_cpu,
              "blas_threads": blas_threads(), "shard_loop_cpu_s": shard_loop_cpu, "rss_before_data_mb": rss_before_data,
              "phases": dict(worker.phase_seconds),
              "phase_cpu": dict(worker.phase_cpu_seconds), "progressive": worker.metrics.total.summary(),
              # the transforms this worker trained with last: its standardized fields' running statistics
              "dense_transforms": [t.model_dump(mode="json") for t in model.config.dense_transforms]}
    results = Path(job["results"])
    result["prefetch_rss_mb"] = batches.stats.get("peak_rss_mb", 0.0)  # a prefetch process's memory counts too
    result["peak_rss_mb"] = peak_rss_mb() + result["prefetch_rss_mb"]
    (results / f"worker-{spec.rank}.json").write_text(json.dumps(result))
    if spec.mode == "sync":
        # a worker with fewer batches than another joins the step barriers it has no batch for, so none waits forever
        for _ in range(-(-produced.get("blocks", 0) // spec.num_workers) - ps.steps):
            store.end_step()
    store.drain()
    worker.dense.flush(store)
    ps.client.barrier(_FINISH_STEP, spec.num_workers, timeout_s=3600)
    if spec.rank == 0:
        worker.dense.refresh(store)  # every worker's last change is in
        worker.dense.serve_average()  # model.dense_average: the test set is scored with the averaged weights
        _evaluate(spec, job, worker, ps, results)
    ps.close()
    return result


def _shard_pids(ps: PSWorker) -> list[int]:
    """The shards' process ids (their CPU is read from /proc: same host only, else 0)."""
    return [int(h["pid"]) for h in ps.client.admin.health()]


def _evaluate(spec: ClusterSpec, job: dict[str, Any], worker: Worker, ps: PSWorker, results: Path) -> None:
    from logrecords.generator import roc_auc

    ranks = [json.loads((results / f"worker-{r}.json").read_text()) for r in range(spec.num_workers)]
    # read before the test pass, whose pulls are no training's
    shard_stats = ps.client.admin.stats()
    shard_staleness = [s["staleness"] for s in shard_stats if "staleness" in s]
    # the keys each shard served in training (pulls and pushes over its tables): a shard's keys per CPU second
    shard_keys = [sum(t.get("pulled_keys", 0) + t.get("pushed_keys", 0) for t in s.get("tables", {}).values())
                  for s in shard_stats]
    labels, probs = [], []
    start, cpu = time.perf_counter(), time.process_time()
    batches = start_prefetch("thread", partial(prepared_batches, spec, job, test=True), depth=2)
    try:
        for prepared in batches:
            labels.append(prepared.batch.labels)
            probs.append(worker.score(prepared))
    finally:
        batches.close()
    test_seconds, test_cpu_s = time.perf_counter() - start, time.process_time() - cpu
    y, p = np.concatenate(labels), np.concatenate(probs).astype(np.float64)
    if job.get("predictions"):
        np.savetxt(job["predictions"], p, fmt="%.6f")
    pc = np.clip(p, 1e-7, 1 - 1e-7)
    shard_pids = _shard_pids(ps)
    shard_rss = [process_peak_rss_mb(pid) for pid in shard_pids]
    shard_cpu = [process_cpu_seconds(pid) for pid in shard_pids]
    rss = sum(r["peak_rss_mb"] for r in ranks[1:]) + peak_rss_mb() + ranks[0]["prefetch_rss_mb"] + sum(shard_rss)
    train_rows = sum(r["records"] for r in ranks)
    train_seconds = max(r["seconds"] for r in ranks)
    out = {"train_rows": train_rows, "train_seconds": round(train_seconds, 3),
           "samples_per_s": round(train_rows / train_seconds, 1), "test_rows": int(y.shape[0]),
           "test_seconds": round(test_seconds, 3), "test_samples_per_s": round(y.shape[0] / test_seconds, 1),
           "test_cpu_s": round(test_cpu_s, 3),
           "test_auc": roc_auc(y, p), "test_logloss": float(-(y * np.log(pc) + (1 - y) * np.log1p(-pc)).mean()),
           "peak_rss_mb": round(rss, 1), "rss_mb": {"shards": shard_rss, "chief": peak_rss_mb(),
                                                   "workers": [r["peak_rss_mb"] for r in ranks]},
           "shard_cpu_s": shard_cpu, "shard_loop_cpu_s": ranks[0].get("shard_loop_cpu_s", []),
           "shard_keys": shard_keys,
           "rejected": _sum_counts(r["rejected"] for r in ranks),
           "test_rejected": (batches.result or {}).get("rejected", {}),
           # records lacking each required field (refused ones are also in rejected's absent_field)
           "absent_fields": _sum_counts(r.get("absent_fields", {}) for r in ranks),
           "test_absent_fields": (batches.result or {}).get("absent_fields", {}),
           "staleness": summarize(shard_staleness) if shard_staleness else None,
           # the chief's: what the test set was scored with (a bundle of this model would carry them)
           "dense_transforms": [t.model_dump(mode="json") for t in worker.model.config.dense_transforms],
           "workers": ranks}
    (results / "result.json").write_text(json.dumps(out))


def _sum_counts(counts: Any) -> dict[str, int]:
    total: dict[str, int] = {}
    for c in counts:
        for k, v in c.items():
            total[k] = total.get(k, 0) + int(v)
    return total


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    job = json.loads(Path(args[0]).read_text())
    train(cluster_from_env(), job)
    return 0


if __name__ == "__main__":
    sys.exit(main())
