"""``streamrec schema infer FILE``: propose the streamrec YAML (schema + model) for a data file.

The guesses come from :mod:`logrecords.schema_inference`; this module writes them as the root
config (``streamrec up --config`` / ``config check`` / ``train-files --config``), one YAML
comment per guess, and checks the text with the config loader before printing it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from logrecords.dense_transform import DenseTransform
    from logrecords.schema_inference import Inference


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("schema", help="propose a schema and model for a JSON-lines, CSV or Parquet file")
    sub = p.add_subparsers(dest="schema_command", required=True)
    infer = sub.add_parser("infer", help="read a sample of FILE and print a streamrec YAML that runs as is, "
                           "with a comment per guess")
    infer.add_argument("file", metavar="FILE")
    infer.add_argument("--label", help="the label column (default: one named label/click/clicked/y/target)")
    infer.add_argument("--user", help="the user id column (with --item: a two_tower model)")
    infer.add_argument("--item", help="the item id column (with --user: a two_tower model)")
    infer.add_argument("--event-time", dest="event_time",
                       help="the event time column: epoch numbers or ISO-8601 text, its unit found from the sample "
                            "(default: a column found: see `schema infer` docs)")
    infer.add_argument("--format", choices=["json", "csv", "parquet"], help="default: from the file's extension")
    infer.add_argument("--sample", type=int, default=10_000, help="records read (the first N)")
    infer.add_argument("--max-line-bytes", type=int, default=None,
                       help="a longer line of a JSON-lines or CSV file is left out (and counted) unread "
                            "(default: 16 MiB)")
    infer.add_argument("--out", help="write the YAML here instead of standard output")
    infer.set_defaults(func=run_infer)


def run_infer(args: argparse.Namespace) -> int:
    from core.errors import ConfigError
    from logrecords.schema_inference import DEFAULT_MAX_LINE_BYTES, infer_schema

    if args.sample < 1:
        raise ConfigError("--sample must be >= 1")
    max_line_bytes = DEFAULT_MAX_LINE_BYTES if args.max_line_bytes is None else args.max_line_bytes
    if max_line_bytes < 1:
        raise ConfigError("--max-line-bytes must be >= 1")
    if (args.user is None) != (args.item is None):
        raise ConfigError("--user and --item go together (a two_tower model needs both)")
    inference = infer_schema(args.file, fmt=args.format, label=args.label, user=args.user, item=args.item,
                             event_time=args.event_time, sample=args.sample, max_line_bytes=max_line_bytes)
    for note in inference.notes:
        print(f"streamrec schema infer: note: {note}", file=sys.stderr)
    text = render_yaml(inference, command=_command(args))
    check_yaml(text, source=f"schema infer {args.file}")
    if args.out:
        Path(args.out).write_text(text)
        print(f"wrote {args.out}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def _command(args: argparse.Namespace) -> str:
    parts = ["streamrec schema infer", args.file]
    for flag in ("label", "user", "item", "event_time", "format"):
        if getattr(args, flag):
            parts += [f"--{flag.replace('_', '-')}", getattr(args, flag)]
    return " ".join(parts)


# A two_tower proposal with an event time pools each user's recent liked items, as examples/two_tower_ratings.yaml
# does: bench/retrieval.py measured it there (bench/RESULTS.md).
HISTORY_LENGTH = 20


def _history_slot(inference: Inference) -> str:
    """The history's slot name: ``history``, unless the records have a field of that name."""
    names = {f.name for f in inference.fields}
    return next(n for n in ("history", "user_history", "liked_history") if n not in names)

LABEL0_HINT = [
    "    # retrieval: {label0_weight: 0.5}  # when a label-0 record is still the user's choice (rated low, not",
    "    # passed over): the softmax learns from it too. Left off: on MovieLens 100K it cost recall@10, on a",
    "    # planted log of picks it gained (bench/RESULTS.md)",
]


def _user_id_optimizer() -> str:
    """The user id slot's optimizer as YAML flow keys: what bench/retrieval.py's streamrec config measured best for a
    log of users picking items (bench/RESULTS.md)."""
    from models.model_config import DRIFTING_USER_ID_OPTIMIZER

    return ", optimizer: {" + ", ".join(f"{k}: {v}" for k, v in DRIFTING_USER_ID_OPTIMIZER.items()) + "}"


def _q(name: str) -> str:
    return json.dumps(name)  # a JSON string is a YAML flow scalar: any column name survives


def render_yaml(inference: Inference, *, command: str) -> str:
    """The root config as YAML text, one comment per guess."""
    f_all = inference.fields
    schema = inference.schema()
    dense = [f for f in f_all if f.role == "dense"]
    sparse = [f for f in f_all if f.role == "sparse"]
    two_tower = inference.user is not None and inference.item is not None
    out = [f"# Proposed by `{command}` from the first {inference.records} records of {inference.path.name}.",
           "# Every guess says why; edit what is wrong. Check: streamrec config check --config THIS.yaml",
           "# Train on the file: streamrec train-files --config THIS.yaml --train FILE --test FILE"]
    out += [f"# note: {n}" for n in inference.notes]
    out += ["schema:", f"  format: {schema.format}"]
    label = next(f for f in f_all if f.role == "label")
    rule = "" if label.at_least is None else f"{{field: {_q(label.name)}, at_least: {label.at_least:g}}}"
    out.append(f"  label: {rule or _q(label.name)}  # {label.why}")
    if schema.format == "csv":
        out.append(f"  delimiter: {_q(schema.delimiter)}  # sniffed from the header row")
        out.append(f"  columns: [{', '.join(map(_q, schema.columns))}]  # the header: names the columns of "
                   "header-less records (Kafka messages)")
    etime = next((f for f in f_all if f.role == "event_time"), None)
    if etime is not None:
        out.append(f"  event_time: {_q(etime.name)}  # {etime.why}")
        if etime.unit != "s":
            out.append(f"  event_time_unit: {etime.unit}  # the parsers read the event time in this unit")
    if two_tower:
        out.append(f"  user_id: {_q(inference.user)}  # --user")
        out.append(f"  item_id: {_q(inference.item)}  # --item")
    if two_tower and etime is not None:
        out.append(f"  history: {{slot: {_history_slot(inference)}, length: {HISTORY_LENGTH}}}  # each user's last "
                   f"{HISTORY_LENGTH} liked items, kept in the PS, joined point-in-time by `streamrec up` "
                   "(train-files leaves the slot empty)")
    out.append("  slots:")
    for f in dense:
        opt = ", optional: true" if f.optional else ""
        opt += _transform_yaml(f.transform)
        out.append(f"    - {{name: {_q(f.name)}, kind: dense{opt}}}  # {f.why}")
    for f in sparse:
        sep = f", separator: {_q(f.separator)}" if f.separator else ""
        sep += ", optional: true" if f.optional else ""
        out.append(f"    - {{name: {_q(f.name)}, kind: sparse, hash: {f.hash.value}{sep}}}  # {f.why}")
    for f in f_all:
        if f.role == "ignored":
            out.append(f"    # {f.name or '(no name)'}: ignored: {f.why}")
    out += ["train:", "  model:"]
    if two_tower:
        out += ["    type: two_tower  # --user and --item: retrieval towers, item vectors served by /similar",
                f"    n_dense: {len(dense)}  # the schema's dense fields (they feed the user tower)",
                "    # sizes: two_tower's defaults (linear towers, 32-dim embeddings, 64-dim vectors)", "    slots:"]
        for f in sparse:
            extra = _user_id_optimizer() if f.name == inference.user else ""
            extra += ", pooling: mean" if f.many else ""
            out.append(f"      - {{name: {_q(f.name)}, tower: {f.tower}{extra}}}  # {f.why.rsplit('; ', 1)[-1]}")
        if etime is not None:
            out.append(f"      - {{name: {_history_slot(inference)}, tower: user, pooling: attention}}  # the user "
                       "history: a learned query pools it")
        if any(f.name == inference.user for f in sparse):
            out += ["      # (the user id's rows on RMSprop-like steps in a table of their own: a user whose taste",
                    "      # drifts keeps moving, as in examples/two_tower_ratings.yaml)"]
        out += LABEL0_HINT
    else:
        out += ["    type: wide_deep  # no --user/--item: a click model over every field",
                f"    n_dense: {len(dense)}  # the schema's dense fields", "    embedding_dim: 8", "    mlp: [64, 32]",
                "    slots:  # one per sparse field of the schema"]
        out += [f"      - {{name: {_q(f.name)}}}" for f in sparse]
    return "\n".join(out) + "\n"


def check_yaml(text: str, *, source: str) -> None:
    """Validate proposed YAML with the config loader; the model must fit the schema."""
    import yaml

    from core.errors import ConfigError
    from core.yaml_config import validate_config
    from launcher.system_config import StreamrecConfig

    config = validate_config(yaml.safe_load(text), StreamrecConfig, source)
    schema, model = config.schema_, config.train.model
    sparse = {s.name for s in schema.sparse_slots} | ({schema.history.slot} if schema.history else set())
    if model.n_dense != len(schema.dense_names) or any(s.name not in sparse for s in model.slots):
        raise ConfigError(f"{source}: the proposed model does not fit the proposed schema (a bug)")


def _transform_yaml(t: DenseTransform) -> str:
    """The slot's ``transform`` key in flow style, with the keys that differ from their defaults; nothing
    for the default log1p."""
    from logrecords.dense_transform import Log1pTransform

    if isinstance(t, Log1pTransform):
        return ""
    keys = {"kind": t.kind, **t.model_dump(exclude_defaults=True)}
    fields = ", ".join(f"{k}: {_yaml_scalar(v)}" for k, v in keys.items())
    return f", transform: {{{fields}}}"


def _yaml_scalar(v: object) -> str:
    """A number or flag as YAML reads it back exactly: floats by repr, booleans in lower case."""
    if isinstance(v, bool):
        return "true" if v else "false"
    return repr(v) if isinstance(v, float) else str(v)
