"""``streamrec train-files``: one pass over training files with S shard processes and W worker
processes (the launcher's machinery), then evaluation on a test file by worker 0.

Workers run with one BLAS thread each (``blas_threads``, passed to every role as
:func:`launcher.launch.thread_limits`): with W workers on few cores, more threads only contend
(slower, with more CPU time: bench/RESULTS.md).
"""

from __future__ import annotations

import io
import json
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args

import yaml

from core.errors import ConfigError, StreamrecError, Unavailable
from core.fork_server import DEFAULT_START_METHOD, StartMethod
from logrecords.schema_config import SchemaConfig
from models.model_config import ModelConfig
from ps.cluster import Mode
from ps.ps_config import PSConfig, ShardLimits
from tables.table_config import TableConfig
from trainer.job_config import DEFAULT_DENSE_SYNC_STEPS, DenseUpdate
from trainer.prefetch import PrefetchKind
from trainer.process_stats import peak_rss_mb


@dataclass(frozen=True)
class FileJob:
    train: tuple[str, ...]
    test: str
    model: ModelConfig
    batch_size: int = 512
    servers: int = 1
    workers: int = 1
    mode: Mode = "async"
    predictions: str | None = None
    blas_threads: int = 1
    dense_update: DenseUpdate = DenseUpdate.LOCAL
    # async: local merges each worker's dense model every k steps, ps pulls it
    dense_sync_steps: int = DEFAULT_DENSE_SYNC_STEPS
    prefetch: PrefetchKind = "thread"  # where the next batches are parsed and pulled (trainer.prefetch)
    schema: SchemaConfig | None = None  # the record schema (None: Criteo TSV); files of any format it fits
    tables: tuple[TableConfig, ...] | None = None  # the shards' tables (None: the model's), e.g. another admission
    staleness_sample: int = 0  # the shards follow 1 in this many keys' staleness (ps.staleness); 0: off
    dense_parts: int | str = "auto"  # dense optimizer steps per batch, one per slice of its records (wide_deep)
    start_method: StartMethod = DEFAULT_START_METHOD  # how the shards and workers are started


def criteo_model(model: str, *, embedding_dim: int, mlp: tuple[int, ...], optimizer: str, lr: float,
                 seed: int = 0) -> ModelConfig:
    """A model over the Criteo layout: C1..C26 (C2 is the item slot for two-tower), 13 dense inputs."""
    slots = [{"name": f"C{i}", "tower": "item" if i == 2 else "user"} for i in range(1, 27)]
    return ModelConfig.model_validate({"type": model, "slots": slots, "n_dense": 13, "embedding_dim": embedding_dim,
                                       "mlp": mlp, "dense_optimizer": {"kind": optimizer, "lr": lr}, "seed": seed})


def run_file_job(job: FileJob, *, work_dir: Path | None = None, log: io.TextIOBase | None = None) -> dict[str, Any]:
    from launcher.launch import Launcher, LaunchSpec, thread_limits

    if job.prefetch not in get_args(PrefetchKind):
        raise ConfigError(f"prefetch must be one of {get_args(PrefetchKind)}, got {job.prefetch!r}")
    with tempfile.TemporaryDirectory(prefix="streamrec-train-files-") as tmp:
        root = Path(work_dir or tmp)
        root.mkdir(parents=True, exist_ok=True)
        ps_yaml = root / "ps.yaml"
        tables = job.model.table_configs() if job.tables is None else job.tables
        ps_config = PSConfig(tables=tables, shard=ShardLimits(staleness_sample=job.staleness_sample))
        ps_yaml.write_text(yaml.safe_dump(ps_config.model_dump(mode="json")))
        results = root / "results"
        results.mkdir(exist_ok=True)
        spec_path = root / "job.json"
        spec_path.write_text(json.dumps({"model": job.model.model_dump(mode="json"), "train": list(job.train),
                                         "test": job.test, "batch_size": job.batch_size, "results": str(results),
                                         "predictions": job.predictions,
                                         "dense_sync_steps": job.dense_sync_steps, "prefetch": job.prefetch,
                                         "dense_update": str(job.dense_update),
                                         "staleness_sample": job.staleness_sample, "dense_parts": job.dense_parts,
                                         "schema": None if job.schema is None else job.schema.model_dump(mode="json")}))
        launcher = Launcher(LaunchSpec(
            servers=job.servers, workers=job.workers, command=(sys.executable, "-m", "trainer.file_worker",
                                                               str(spec_path)),
            ps_config=ps_yaml, log_dir=root / "logs", checkpoint_dir=root / "checkpoints", mode=job.mode,
            env=thread_limits(job.blas_threads), start_method=job.start_method,
        ), out=log or sys.stderr)
        code = launcher.run()
        result_path = results / "result.json"
        if code != 0 or not result_path.is_file():
            tails = []
            for p in sorted((root / "logs").glob("*.log")):
                tails.append(f"--- {p.name}\n" + "\n".join(p.read_text(errors="replace").splitlines()[-15:]))
            raise Unavailable(f"train-files job failed (exit {code})\n" + "\n".join(tails))
        result = json.loads(result_path.read_text())
    result["peak_rss_mb"] = round(result["peak_rss_mb"] + peak_rss_mb(), 1)
    return result


__all__ = ["FileJob", "StreamrecError", "criteo_model", "run_file_job"]
