"""``streamrec deploy render``: the Kubernetes manifests (a Kustomize base and a monitoring
overlay) from one values file."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("deploy", help="render the Kubernetes manifests from a values file")
    sub = p.add_subparsers(dest="deploy_command", required=True)
    render = sub.add_parser("render", help="write base/ and monitoring/ (Kustomize) from the values")
    render.add_argument("--values", required=True, help="values YAML (e.g. deploy/k8s/values.yaml)")
    render.add_argument("--out", required=True, help="directory that gets base/ and monitoring/ (e.g. deploy/k8s)")
    render.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 naming the files that differ from what the values render")
    render.set_defaults(func=run_render)
    docs = sub.add_parser("docs", help="print docs/deployment-values.md, every values key, from the values model")
    docs.add_argument("--write", metavar="PATH", help="write it to PATH instead (e.g. docs/deployment-values.md)")
    docs.set_defaults(func=run_docs)


def run_render(args: argparse.Namespace) -> int:
    from launcher.k8s_render import render, stale, write
    from launcher.k8s_values import load_values

    values_file = Path(args.values)
    files = render(load_values(values_file), values_file=values_file)
    out = Path(args.out)
    if args.check:
        differ = stale(files, out)
        for rel in differ:
            print(f"stale: {out / rel}", file=sys.stderr)
        return 1 if differ else 0
    for path in write(files, out):
        print(path)
    return 0


def run_docs(args: argparse.Namespace) -> int:
    from cli.commands.config import print_or_write
    from launcher.k8s_render import values_reference

    return print_or_write(values_reference(), args.write, "values reference")
