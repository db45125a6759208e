"""``streamrec train-files`` (one pass over files, then a test evaluation) and ``streamrec train``
(the streaming job: see trainer/job.py)."""

from __future__ import annotations

import argparse
import json
import sys

from core.fork_server import DEFAULT_START_METHOD, StartMethod


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("train-files", help="train one pass over files with S shards and W workers, then test")
    p.add_argument("--train", action="append", required=True, help="training file (repeat for more, in order)")
    p.add_argument("--test", required=True, help="test file")
    p.add_argument("--config", help="streamrec YAML (e.g. from `streamrec schema infer`): its schema reads the files "
                   "and its train.model is trained (--model and the model flags are then ignored)")
    p.add_argument("--format", choices=["criteo", "json", "csv", "parquet"],
                   help="format of files whose extension names none (.jsonl/.csv/.parquet/.tsv do); default: "
                   "the config's schema.format, else criteo")
    p.add_argument("--model", choices=["lr", "wide_deep", "deepfm", "two_tower"], default="wide_deep")
    p.add_argument("--embedding-dim", type=int, default=9)
    p.add_argument("--mlp", default="400,400,400", help="hidden layer sizes, comma separated")
    p.add_argument("--batch-size", type=int, default=512)
    p.add_argument("--optimizer", choices=["adam", "adagrad", "sgd"], default="adam", help="dense optimizer")
    p.add_argument("--lr", type=float, default=0.001, help="dense learning rate")
    p.add_argument("--servers", type=int, default=1)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--mode", choices=["async", "sync", "geo"], default="async")
    p.add_argument("--dense-update", choices=["local", "ps"], default="local",
                   help="local: each worker runs the dense optimizer and merges its changes through the PS; "
                   "ps: workers push dense gradients and the shards run the optimizer")
    p.add_argument("--dense-sync-steps", type=int,
                   help="async: local merges each worker's dense model through the PS every k steps, "
                   "ps pulls it every k steps (default: the streaming job's train.dense_sync_steps)")
    p.add_argument("--prefetch", choices=["thread", "process"], default="thread",
                   help="parse, build features and pull the next batches in a thread (faster on a quiet host) or a "
                   "child process (faster under heavy load)")
    p.add_argument("--dense-parts", default="auto",
                   help="wide_deep: the MLP takes this many steps per batch, one per slice of its records "
                   "(the embeddings one, on the whole batch); auto: one per 8 workers (16 workers: 2)")
    p.add_argument("--staleness-sample", type=int, default=0,
                   help="the shards follow 1 in N keys: updates a row took between a worker's pull and its push "
                   "(p50/p99 in the JSON result's staleness); 0: off")
    p.add_argument("--start-method", choices=[m.value for m in StartMethod], default=DEFAULT_START_METHOD.value,
                   help="fork_server: shards and workers are forked from a parent that loaded numba and streamrec "
                   "once; spawn: each is exec'd as a fresh interpreter (default: `up.start_method`'s, %(default)s)")
    p.add_argument("--predictions", help="write one predicted probability per test row here")
    p.add_argument("--work-dir", help="keep logs and shard files here (default: a temp dir)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run_files)
    register_stream(subparsers)
    register_infer(subparsers)


def run_files(args: argparse.Namespace) -> int:
    from pathlib import Path

    from core.errors import ConfigError
    from launcher.file_job import FileJob, criteo_model, run_file_job
    from trainer.job_config import DEFAULT_DENSE_SYNC_STEPS, DenseUpdate

    try:
        mlp = tuple(int(x) for x in args.mlp.split(",") if x.strip())
    except ValueError:
        raise ConfigError(f"--mlp must be comma-separated integers, got {args.mlp!r}") from None
    if args.servers < 1 or args.workers < 1 or args.batch_size < 1:
        raise ConfigError("--servers, --workers and --batch-size must be >= 1")
    if args.dense_sync_steps is not None and args.dense_sync_steps < 1:
        raise ConfigError(f"--dense-sync-steps must be >= 1, got {args.dense_sync_steps}")
    if args.dense_parts != "auto":
        if not args.dense_parts.isdigit() or int(args.dense_parts) < 1:
            raise ConfigError(f"--dense-parts must be auto or an integer >= 1, got {args.dense_parts!r}")
        args.dense_parts = int(args.dense_parts)
        from trainer.worker import check_dense_parts

        check_dense_parts(args.dense_parts, args.mode)
    if args.staleness_sample < 0:
        raise ConfigError(f"--staleness-sample must be >= 0 (0: off), got {args.staleness_sample}")
    for path in [*args.train, args.test]:
        if not Path(path).is_file():
            raise ConfigError(f"no such file: {path}")
    schema, model = _schema_and_model(args)
    if model is None:
        model = criteo_model(args.model, embedding_dim=args.embedding_dim, mlp=mlp, optimizer=args.optimizer,
                             lr=args.lr)
    job = FileJob(train=tuple(str(Path(p).resolve()) for p in args.train), test=str(Path(args.test).resolve()),
                  model=model, batch_size=args.batch_size, servers=args.servers, workers=args.workers, mode=args.mode,
                  predictions=str(Path(args.predictions).resolve()) if args.predictions else None,
                  dense_sync_steps=args.dense_sync_steps or DEFAULT_DENSE_SYNC_STEPS, prefetch=args.prefetch,
                  dense_update=DenseUpdate(args.dense_update), schema=schema,
                  staleness_sample=args.staleness_sample, dense_parts=args.dense_parts,
                  start_method=StartMethod(args.start_method))
    result = run_file_job(job, work_dir=Path(args.work_dir) if args.work_dir else None)
    keys = ("train_rows", "train_seconds", "samples_per_s", "test_auc", "test_logloss", "peak_rss_mb")
    if args.json:
        print(json.dumps({k: result[k] for k in keys} | {"test_rows": result["test_rows"], "rss_mb": result["rss_mb"]}))
    else:
        for k in keys:
            print(f"{k:>15}: {result[k]}")
    return 0


def _schema_and_model(args: argparse.Namespace) -> tuple:
    """(schema, model or None) of train-files: the config's, or Criteo TSV's with the flags' model."""
    from core.errors import ConfigError
    from logrecords.file_formats import format_of
    from logrecords.schema_config import SchemaConfig

    if args.config is None:
        formats = {args.format or format_of(p) or "criteo" for p in [*args.train, args.test]}
        if formats != {"criteo"}:
            raise ConfigError(f"{', '.join(sorted(formats - {'criteo'}))} files need their schema: --config FILE "
                              "(`streamrec schema infer FILE > FILE.yaml` proposes one)")
        return SchemaConfig.criteo(), None
    from launcher.system_config import load_config

    config = load_config(args.config)
    schema, model = config.schema_, config.train.model
    if args.format and args.format != schema.format:
        try:
            schema = SchemaConfig.model_validate(schema.model_dump() | {"format": args.format})
        except ValueError as exc:
            raise ConfigError(f"--format {args.format} does not fit {args.config}'s schema: {exc}") from None
    if schema.history is not None:  # joined from the stream's PS rows by `up`'s trainers only
        history = schema.history.slot
        print(f"streamrec train-files: note: the user history ('{history}') is joined by `streamrec up` only; "
              "these files train without it", file=sys.stderr)
        schema = schema.model_copy(update={"history": None})
        model = model.model_copy(update={"slots": tuple(s for s in model.slots if s.name != history)})
    sparse = {s.name for s in schema.sparse_slots}
    unknown = [s.name for s in model.slots if s.name not in sparse]
    if unknown:
        raise ConfigError(f"{args.config}: train.model.slots names {unknown}, not sparse slots of the schema")
    if model.n_dense != len(schema.dense_names):
        raise ConfigError(f"{args.config}: train.model.n_dense is {model.n_dense}, the schema has "
                          f"{len(schema.dense_names)} dense fields")
    return schema, model


def register_stream(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "train", help="streaming training worker: Kafka -> PS, passes commit checkpoints and export bundles",
        description="Run under `streamrec launch` (or with STREAMREC_*/TF_CONFIG set): worker 0 is the chief; it "
        "commits passes, exports bundles and serves job control (endpoint in <checkpoint_dir>/control.json). "
        "STREAMREC_RANK=auto claims the rank as a lease on shard 0 (a replacement takes over a dead worker's).")
    p.add_argument("--config", required=True, help="job YAML (model, records, kafka, passes, ...)")
    p.add_argument("--bootstrap", help="host:port[,host:port] of Kafka (overrides kafka.bootstrap_servers)")
    p.add_argument("--max-idle-s", type=float, help="commit and stop after this long without records")
    p.add_argument("--max-records", type=int, help="commit and stop after training this many records")
    p.add_argument("--metrics-port", type=int, help="serve Prometheus /metrics on this port (0: off; default: the "
                   "job config's metrics.port), on metrics.host, else the control endpoint's host")
    p.set_defaults(func=run_stream)


def run_stream(args: argparse.Namespace) -> int:
    import signal
    from contextlib import ExitStack

    from core.errors import ConfigError
    from core.logs import set_role
    from core.metrics_http import endpoint_host, serve_metrics
    from jobcontrol.channel import CONTROL_FILE, ControlServer, advertised_endpoint
    from ps.cluster import cluster_from_env
    from stores.store import open_store
    from trainer.job import StreamingJob
    from trainer.job_config import load_job_config
    from trainer.job_control import JobControl
    from trainer.rank_claim import RankLease
    from trainer.trainer_metrics import trainer_registry

    config = load_job_config(args.config)
    bootstrap = args.bootstrap.split(",") if args.bootstrap else list(config.kafka.bootstrap_servers)
    if not bootstrap:
        raise ConfigError("train needs Kafka: set kafka.bootstrap_servers or --bootstrap")
    spec = cluster_from_env()
    if not spec.leased_rank:
        set_role(f"worker.{spec.rank}")
    running: list[StreamingJob] = []

    def on_sigterm(*_: object) -> None:  # Kubernetes stops a pod with SIGTERM: release the rank at once
        if running:
            running[0].stopping.set()  # the loop ends after this step
        else:
            raise SystemExit(143)  # still starting: unwind, the ExitStack below releases the rank

    signal.signal(signal.SIGTERM, on_sigterm)
    with ExitStack() as roots:
        lease = RankLease(spec) if spec.leased_rank else None
        if lease is not None:
            roots.callback(lease.close)  # last out: released after the job stopped
            spec = spec.model_copy(update={"rank": lease.rank})
            set_role(f"worker.{lease.rank}")
        # checkpoint_dir and export_dir may be URLs (s3://...): the job reads and writes them through
        # stores.store, so this worker needs no filesystem shared with the shards or the service
        job = StreamingJob(config, spec, bootstrap=bootstrap, max_idle_s=args.max_idle_s,
                           max_records=args.max_records, lease=lease)
        running.append(job)
        metrics = serve_metrics(trainer_registry(job), config.metrics, port=args.metrics_port,
                                default_host=endpoint_host(config.control_endpoint))
        if metrics is not None:
            roots.callback(metrics.close)
        server = None
        if job.chief:
            server = ControlServer(JobControl(job), config.control_endpoint, secret=spec.secret()).start()
            endpoint = advertised_endpoint(server.endpoint, spec.advertise_host)
            open_store(config.checkpoint_dir).write_json(CONTROL_FILE, {"endpoint": endpoint, "rank": spec.rank})
        try:
            result = job.run()
        finally:
            if server is not None:
                server.stop()
    print(json.dumps(result, default=str))
    return 0


def register_infer(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("infer", help="score files with the PS parameters, no training (two-tower: item vectors)")
    p.add_argument("--config", required=True, help="job YAML (model and record schema)")
    p.add_argument("--data", action="append", required=True, help="file to score (repeat for more)")
    p.add_argument("--prefetch", choices=["thread", "process"], default="thread",
                   help="parse, build features and pull the next batches in a thread (faster on a quiet host) or a "
                   "child process (faster under heavy load)")
    p.add_argument("--predictions", help="write one probability per scored record here")
    p.add_argument("--items", help="two-tower: write the catalogue's item vectors here (ids, vectors arrays)")
    p.set_defaults(func=run_infer)


def run_infer(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ps.cluster import cluster_from_env
    from trainer.infer import infer_files
    from trainer.job_config import load_job_config

    result = infer_files(load_job_config(args.config), cluster_from_env(), args.data,
                         predictions=Path(args.predictions) if args.predictions else None,
                         items_out=Path(args.items) if args.items else None)
    print(json.dumps(result, default=str))
    return 0
