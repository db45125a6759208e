"""docs/configuration.md, generated from the config models (``streamrec config docs``).

Every key reachable from :class:`launcher.system_config.StreamrecConfig` gets a row: its dotted
path (``[]`` marks a list's items), type, default and the ``description=`` of its Field. A key
without a description is an error naming it, so the reference cannot fall behind the models.
The default is the one a key takes when its section leaves it out; a section whose own default
differs from its model's defaults says so in its row.
"""

from __future__ import annotations

import enum
import json
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from core.errors import ConfigError
from launcher.system_config import StreamrecConfig
from models.model_config import TWO_TOWER_DEFAULTS, WIDE_DEEP_DEFAULTS, ModelConfig

COMMAND = "streamrec config docs --write docs/configuration.md"
LONG_DEFAULT = 60  # a longer default is left to `streamrec config check`, which prints it whole

INTRO = f"""\
# Configuration

<!-- Generated from the config models by `{COMMAND}`: edit the models' descriptions, not this file. -->

One YAML file configures everything (`launcher/system_config.py`, `StreamrecConfig`). Every key
has a default that works out of the box, and an unknown key is an error that names the key and
the file. `streamrec config explain KEY` prints one key's entry (`train.passes.seconds`,
`ps.tables.*.eviction.ttl_passes`); `streamrec config check --config FILE` prints the effective
config with its defaults;
`streamrec config render --config FILE --out DIR` writes what each role reads (`ps.yaml`,
`train.yaml`, `service.yaml`), which is how compose and Kubernetes start the roles. Command-line
flags of `streamrec up` (`--kafka`, `--replay`, `--shards`, `--workers`, `--port`, `--rate`,
`--replay-rate`, `--run-dir`) override the file.

A key's default is the one it takes when its section leaves it out. Secrets never live in the
file: the admin token, the PS secret, Kafka and object-store credentials come from the environment
(see [deployment](deployment.md)).
"""


@dataclass(frozen=True)
class Row:
    path: str
    type: str
    default: str
    description: str


@dataclass(frozen=True)
class Section:
    path: str
    model: type[BaseModel]
    description: str
    rows: tuple[Row, ...]


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]


def _is_list(annotation: Any) -> bool:
    return typing.get_origin(annotation) in (list, tuple) or any(_is_list(a) for a in _optional_args(annotation))


def _is_mapping(annotation: Any) -> bool:
    return typing.get_origin(annotation) is dict


def _optional_args(annotation: Any) -> tuple[Any, ...]:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return tuple(a for a in typing.get_args(annotation) if a is not type(None))
    return ()


def _type_name(annotation: Any) -> str:
    """The annotation as a YAML writer reads it: ``int``, ``list of str``, ``one of a, b``, ``... or null``."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(annotation)
        inner = " or ".join(_type_name(a) for a in args if a is not type(None))
        return f"{inner} or null" if type(None) in args else inner
    if origin is typing.Literal:
        return "one of " + ", ".join(f"`{v}`" for v in typing.get_args(annotation))
    if origin in (list, tuple):
        return f"list of {_type_name(typing.get_args(annotation)[0])}"
    if origin is dict:
        key, value = typing.get_args(annotation)
        return f"mapping of {_type_name(key)} to {_type_name(value)}"
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return "one of " + ", ".join(f"`{m.value}`" for m in annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "section"
    return getattr(annotation, "__name__", str(annotation))


def _plain(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _render(value: Any) -> str:
    return json.dumps(_plain(value), separators=(", ", ": "))


def _type_defaults(name: str, defaults: dict[str, Any]) -> str:
    return f"- {name}: " + ", ".join(f"`{k}: {_render(v)}`" for k, v in defaults.items())


# model-level defaults that depend on another key: said once, above the model's table
SECTION_NOTES: dict[type[BaseModel], str] = {
    ModelConfig: "\n".join([
        "Each model type fills its own defaults for the keys its section leaves out (`type` left out: "
        "`wide_deep`); the table shows `lr`'s:\n",
        _type_defaults("`wide_deep` and `deepfm` (`WIDE_DEEP_DEFAULTS`)", WIDE_DEEP_DEFAULTS),
        _type_defaults("`two_tower` (`TWO_TOWER_DEFAULTS`)", TWO_TOWER_DEFAULTS),
    ]),
}


def _default(field: FieldInfo, model: type[BaseModel] | None) -> str:
    """What the key is when its section leaves it out; a section: only where it differs from its model's defaults."""
    if field.default_factory is not None:
        value = field.get_default(call_default_factory=True, validated_data={})
    elif field.default is PydanticUndefined:
        return "required"
    else:
        value = field.default
    if isinstance(value, BaseModel) and model is not None:
        try:
            plain = model()
        except ValueError:  # a model with required keys has no all-defaults form to compare with
            plain = None
        if plain is not None and value == plain:
            return "its keys' defaults"
        base = {} if plain is None else plain.model_dump(mode="json")
        changed = {k: v for k, v in value.model_dump(mode="json").items() if base.get(k, PydanticUndefined) != v}
        text = _render(changed)
        return f"`{text}`" if len(text) <= LONG_DEFAULT else "built in (`streamrec config check` prints it)"
    text = _render(value)
    return f"`{text}`" if len(text) <= LONG_DEFAULT else "built in (`streamrec config check` prints it)"


def sections(root: type[BaseModel] = StreamrecConfig) -> list[Section]:
    """Every model reachable from ``root``, depth first, each at the first path that reaches it.

    Raises ConfigError naming every key without a description."""
    out: list[Section] = []
    first_path: dict[type[BaseModel], str] = {}
    missing: list[str] = []

    def walk(model: type[BaseModel], path: str, description: str) -> None:
        rows, nested = [], []
        for name, field in model.model_fields.items():
            key = f"{path}.{field.alias or name}" if path else field.alias or name
            models = _models_in(field.annotation)
            sub = models[0] if len(models) == 1 else None
            type_name = _type_name(field.annotation)
            text = (field.description or "").strip()
            if not text:
                missing.append(key)
            if sub is not None:
                target = f"{key}[]" if _is_list(field.annotation) else f"{key}.<name>" if _is_mapping(
                    field.annotation) else key
                if sub not in first_path:  # claimed before recursing: a shared model is told where it is used first
                    first_path[sub] = target
                    nested.append((sub, target, text))
                elif first_path[sub] != target:
                    type_name += f" (as `{first_path[sub]}`)"
            rows.append(Row(key, type_name, _default(field, sub), text))
        out.append(Section(path, model, description, tuple(rows)))
        for sub, target, text in nested:
            walk(sub, target, text)

    first_path[root] = ""
    walk(root, "", "")
    if missing:
        raise ConfigError(f"config keys without a description: {', '.join(missing)}", detail={"keys": missing})
    return out


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _lines(secs: list[Section], intro: str) -> Iterator[str]:
    yield intro
    for sec in secs:
        yield f"## `{sec.path}`\n" if sec.path else "## Top level\n"
        where = f"`{sec.model.__module__}.{sec.model.__qualname__}`"
        yield (f"{sec.description} ({where})" if sec.description else where) + "\n"
        if sec.model in SECTION_NOTES:
            yield SECTION_NOTES[sec.model] + "\n"
        yield "| key | type | default | description |"
        yield "|---|---|---|---|"
        for row in sec.rows:
            yield f"| `{row.path}` | {_cell(row.type)} | {_cell(row.default)} | {_cell(row.description)} |"
        yield ""


def render(root: type[BaseModel] = StreamrecConfig, *, intro: str = INTRO) -> str:
    """docs/configuration.md's text (or another root's reference, after its own ``intro``)."""
    return "\n".join(_lines(sections(root), intro)).rstrip("\n") + "\n"
