"""``streamrec config``: check the one YAML, render each role's files from it, or explain a key."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("config", help="check the streamrec YAML or render each role's config files from it")
    sub = p.add_subparsers(dest="config_command", required=True)
    check = sub.add_parser("check", help="validate the YAML (unknown keys are errors) and print it with defaults")
    check.add_argument("--config", help="streamrec YAML (default: built-in defaults)")
    check.add_argument("--data", metavar="FILE", help="also read the first records of FILE and warn about a dense "
                       "field whose values the model cannot tell apart (a raw timestamp, an id)")
    check.set_defaults(func=run_check)
    render = sub.add_parser("render", help="write ps.yaml, train.yaml and service.yaml for the roles")
    render.add_argument("--config", help="streamrec YAML (default: built-in defaults)")
    render.add_argument("--out", required=True, help="directory to write into")
    render.add_argument("--base", help="relative checkpoint/export paths resolve here (default: current directory)")
    render.set_defaults(func=run_render)
    docs = sub.add_parser("docs", help="print docs/configuration.md, generated from the config models")
    docs.add_argument("--write", metavar="PATH", help="write it to PATH instead (e.g. docs/configuration.md)")
    docs.set_defaults(func=run_docs)
    explain = sub.add_parser("explain", help="what a key means: its description, type, default, the model defining "
                             "it and the roles reading it (e.g. train.passes.seconds, ps.tables.*.eviction.ttl)")
    explain.add_argument("key", help="a dotted key; `*` or a name for a mapping's entry")
    explain.set_defaults(func=run_explain)


def run_check(args: argparse.Namespace) -> int:
    from launcher.system_config import load_config

    config = load_config(args.config)
    print(json.dumps(config.model_dump(mode="json", by_alias=True, exclude={"service": {"admin_token"}}), indent=1))
    if args.data:
        from models.dense_inputs import dense_warnings

        for warning in dense_warnings(config.schema_, dense_log1p=config.train.model.dense_log1p, path=args.data):
            print(f"streamrec config check: warning: {warning}", file=sys.stderr)
    return 0


def run_render(args: argparse.Namespace) -> int:
    from launcher.system_config import load_config, write_role_files

    config = load_config(args.config)
    base = Path(args.base).resolve() if args.base else Path.cwd()
    for name, path in write_role_files(config, Path(args.out), base=base).items():
        print(f"{name}: {path}")
    return 0


def run_docs(args: argparse.Namespace) -> int:
    from launcher.config_docs import render

    return print_or_write(render(), args.write, "configuration reference")


def run_explain(args: argparse.Namespace) -> int:
    from launcher.config_explain import explain

    print(explain(args.key), end="")
    return 0


def print_or_write(text: str, path: str | None, what: str) -> int:
    """A generated reference: printed, or written to ``path`` (then only its name is printed)."""
    from core.atomic_files import write_bytes

    if path is None:
        print(text, end="")
    else:
        write_bytes(Path(path), [text.encode()])
        print(f"{what}: {path}")
    return 0
