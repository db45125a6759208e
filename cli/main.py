"""The ``streamrec`` command line: a thin dispatcher.

Each subcommand lives in its own module exposing ``register(subparsers)``, which adds a
parser whose ``func`` default takes the parsed namespace and returns an exit code.
"""

from __future__ import annotations

import argparse
import faulthandler
import importlib
import signal
import sys
import threading
from collections.abc import Sequence

# Modules that define subcommands; each adds its own parser.
COMMAND_MODULES: tuple[str, ...] = (
    "cli.commands.shard",
    "cli.commands.launch",
    "cli.commands.produce",
    "cli.commands.generate",
    "cli.commands.serve",
    "cli.commands.train",
    "cli.commands.config",
    "cli.commands.schema",
    "cli.commands.up",
    "cli.commands.deploy",
)


# The role a command runs, as its log lines name it; a command not here is a tool and prints.
LOG_ROLES: dict[str, str] = {"shard": "shard", "train": "worker", "train-files": "train-files", "serve": "service",
                             "generate": "generator", "produce": "replay", "up": "up", "launch": "launch"}


def log_role(args: argparse.Namespace) -> str | None:
    """The role ``args`` runs (``shard.<index>``; a worker names its rank once it knows it), or None."""
    role = LOG_ROLES.get(args.command)
    return f"{role}.{args.index}" if role == "shard" else role


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="streamrec", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from core.errors import StreamrecError

    args = build_parser().parse_args(argv)
    if threading.current_thread() is threading.main_thread():
        # A shell starts a background job with SIGINT ignored and Python keeps it so: every
        # command stops on Ctrl-C / kill -INT however it was started.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        # `kill -USR1 <pid>`: every thread's stack to stderr (a role's log), so a process that
        # hangs can be read before it is killed (the launcher and `up` do so at their stop); fd 2, since a
        # caller may have replaced sys.stderr with a stream that has no file descriptor.
        faulthandler.register(signal.SIGUSR1, file=sys.__stderr__, all_threads=True)
    try:
        if (role := log_role(args)) is not None:
            from core.logs import configure, load_logging_section

            # every role's file (and the root config) holds the same `logging:` section (`up` renders it)
            configure(role=role, config=load_logging_section(getattr(args, "config", None)))
        return int(args.func(args) or 0)
    except StreamrecError as err:
        print(f"streamrec {args.command}: {err.message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
