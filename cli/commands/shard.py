"""``streamrec shard``: run one parameter-server shard in the foreground."""

from __future__ import annotations

import argparse
from pathlib import Path

from ps.auth import read_secret
from ps.ps_config import load_ps_config


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("shard", help="serve one parameter-server shard")
    p.add_argument("--config", required=True, help="PS YAML: the tables every shard serves")
    p.add_argument("--index", type=int, required=True, help="this shard's index (0-based)")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--host", default="127.0.0.1", help="bind address; anything but loopback needs --secret-file")
    p.add_argument("--checkpoint-dir", help="save here by default and restore the latest save at start")
    p.add_argument("--secret-file", help="file holding the shared HMAC secret")
    p.add_argument("--metrics-port", type=int, help="serve Prometheus /metrics on this port of --host (0: off; "
                   "default: the PS config's metrics.port)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from core.metrics_http import serve_metrics
    from ps.shard_metrics import shard_registry
    from ps.shard_server import ShardServer  # the engine (numba) loads only when a shard runs

    config = load_ps_config(Path(args.config))
    server = ShardServer(
        config,
        index=args.index,
        endpoint=f"tcp://{args.host}:{args.port}",
        checkpoint_dir=args.checkpoint_dir,
        secret=read_secret(args.secret_file) if args.secret_file else None,
    )
    metrics = serve_metrics(shard_registry(server), config.metrics, port=args.metrics_port, default_host=args.host)
    try:
        server.serve_forever()
    finally:
        if metrics is not None:
            metrics.close()
    return 0
