"""Typed configuration loaded from YAML.

All config models derive from :class:`FrozenModel`: immutable, and an unknown key is an
error. :func:`load_yaml` turns pydantic's validation errors into one :class:`ConfigError`
that names the file and the dotted path of every offending key.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from core.errors import ConfigError


class FrozenModel(BaseModel):
    """Base for every config section: frozen, and unknown keys are rejected."""

    model_config = ConfigDict(frozen=True, extra="forbid")


M = TypeVar("M", bound=BaseModel)


def _describe(err: ValidationError, source: str) -> str:
    parts = []
    for e in err.errors():
        where = ".".join(str(p) for p in e["loc"]) or "<root>"
        if e["type"] == "extra_forbidden":
            parts.append(f"unknown key '{where}'")
        else:
            parts.append(f"'{where}': {e['msg']}")
    return f"{source}: " + "; ".join(parts)


def validate_config(data: Any, model: type[M], source: str = "<config>") -> M:
    """Validate a plain mapping against ``model``; errors name ``source`` and the keys."""
    try:
        return model.model_validate(data if data is not None else {})
    except ValidationError as err:
        keys = [".".join(str(p) for p in e["loc"]) for e in err.errors()]
        raise ConfigError(_describe(err, source), detail={"file": source, "keys": keys}) from None


def load_yaml(path: str | Path, model: type[M]) -> M:
    """Load ``path`` as YAML and validate it as ``model``."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read config file: {exc.strerror}", detail={"file": str(p)}) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{p}: invalid YAML: {exc}", detail={"file": str(p)}) from None
    if data is not None and not isinstance(data, dict):
        raise ConfigError(f"{p}: top level must be a mapping, got {type(data).__name__}", detail={"file": str(p)})
    return validate_config(data, model, str(p))
