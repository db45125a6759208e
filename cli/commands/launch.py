"""``streamrec launch``: start shards and workers locally (like ``fleetrun``)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from core.errors import ConfigError


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "launch",
        help="run N parameter-server shards and M workers locally",
        description="Start shards on free loopback ports and run COMMAND once per worker with STREAMREC_* set. "
        "Exits non-zero when any worker fails or a shard stays dead.",
    )
    p.add_argument("--servers", type=int, required=True, help="number of shards")
    p.add_argument("--workers", type=int, required=True, help="number of worker processes running COMMAND")
    p.add_argument("--config", default=os.environ.get("STREAMREC_PS_CONFIG"),
                   help="PS YAML: the tables the shards serve (default: $STREAMREC_PS_CONFIG)")
    p.add_argument("--log-dir", default="logs/launch", help="one log file per role (default: logs/launch)")
    p.add_argument("--checkpoint-dir", help="shard checkpoints (default: <log-dir>/checkpoints)")
    p.add_argument("--max-restart", type=int, default=0, help="restart a dead shard up to K times (default 0)")
    p.add_argument("--mode", choices=("async", "sync", "geo"), default="async", help="PS update mode for workers")
    p.add_argument("--geo-steps", type=int, default=10, help="geo mode: push deltas every this many steps")
    p.add_argument("--secret-file", help="shared HMAC secret for the shards (needed off loopback)")
    # not dest "command": cli/main.py keeps the subcommand's name there
    p.add_argument("worker_command", metavar="COMMAND", nargs=argparse.REMAINDER,
                   help="-- COMMAND ... run by every worker")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from core.logs import configure, load_logging_section
    from launcher.launch import Launcher, LaunchSpec

    command = args.worker_command[1:] if args.worker_command[:1] == ["--"] else args.worker_command
    if not command:
        raise ConfigError("launch needs a worker command after --")
    if args.servers < 1 or args.workers < 1 or args.max_restart < 0:
        raise ConfigError("--servers and --workers must be >= 1, --max-restart >= 0")
    log_dir = Path(args.log_dir)
    checkpoint_dir = Path(args.checkpoint_dir) if args.checkpoint_dir else log_dir / "checkpoints"
    if not args.config or not Path(args.config).is_file():
        raise ConfigError(
            f"--config {args.config or '(unset)'}: no such file; pass the PS YAML or set STREAMREC_PS_CONFIG"
        )
    spec = LaunchSpec(
        servers=args.servers,
        workers=args.workers,
        command=tuple(command),
        ps_config=Path(args.config).resolve(),
        log_dir=log_dir.resolve(),
        checkpoint_dir=checkpoint_dir.resolve(),
        max_restart=args.max_restart,
        mode=args.mode,
        geo_steps=args.geo_steps,
        secret_file=Path(args.secret_file).resolve() if args.secret_file else None,
    )
    # the launcher's own lines (roles started, restarted, exited) beside the roles' logs
    configure(role="launch", config=load_logging_section(spec.ps_config), path=spec.log_dir / "launch.log")
    return Launcher(spec).run()
