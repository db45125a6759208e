"""``streamrec up``: run the whole system locally (broker, generator, shards, trainers, service)."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "up", help="run everything locally from one YAML: Kafka, events, shards, trainers, the API",
        description="Start the embedded Kafka broker (unless --kafka), the event generator (or --replay FILE), "
                    "S shards, W trainers and the service, with a live console. Ctrl-C commits a final pass and "
                    "stops everything; a second `up` with the same run directory resumes from the last pass.")
    p.add_argument("--config", help="streamrec YAML (default: built-in defaults; see examples/)")
    p.add_argument("--kafka", metavar="BOOTSTRAP", help="host:port[,host:port] of a real Kafka cluster")
    p.add_argument("--replay", metavar="FILE", help="replay this Criteo/JSON-lines file instead of generating events")
    p.add_argument("--replay-format", choices=["criteo", "json"], default="json")
    p.add_argument("--shards", type=int, help="parameter-server shards (default: up.shards)")
    p.add_argument("--workers", type=int, help="trainer processes (default: up.workers)")
    p.add_argument("--host", help="API bind address (default: up.host, 127.0.0.1)")
    p.add_argument("--port", type=int, help="API port (default: up.port, 8000)")
    p.add_argument("--rate", type=float, help="generated records per second (default: up.generator.rate)")
    p.add_argument("--replay-rate", type=float, metavar="N",
                   help="replay at most N records per second (default: up.replay.rate, unset: as fast as the "
                        "trainers take it; either way paused while they lag by more than up.replay.max_lag)")
    p.add_argument("--run-dir", help="logs, checkpoints and exports (default: up.run_dir)")
    p.add_argument("--plain", action="store_true", help="progress lines instead of the live console")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from core.logs import configure
    from launcher.system_config import load_config
    from launcher.up import options_from, run_up
    from launcher.up_run_dir import RunDir

    opts = options_from(load_config(args.config), run_dir=args.run_dir, kafka=args.kafka, replay=args.replay,
                        replay_format=args.replay_format, shards=args.shards, workers=args.workers,
                        port=args.port, host=args.host, rate=args.rate,
                        replay_rate=args.replay_rate)
    # up's own lines (roles started, restarted, exited) go to its log beside the roles', not over the console
    configure(role="up", config=opts.config.logging, path=RunDir(opts.run_dir.resolve()).log("up"))
    return run_up(replace(opts, console=not args.plain))
