"""``streamrec config explain KEY``: one key of the root YAML, as docs/configuration.md has it.

A key is its dotted path; a mapping's entry (``ps.tables.<name>``) may be written ``*`` or by a
name (``ps.tables.emb8.eviction.ttl``), a list's items (``schema.slots[]``) ``slots``, ``slots[]``
or ``slots[3]``. The answer says what the key means, its type and default, the model that defines
it and which roles read it; a section lists its keys; an unknown key is an error naming the
nearest ones.
"""

from __future__ import annotations

import difflib
import re

from core.errors import ConfigError
from launcher.config_docs import Row, Section, sections

# the roles that read each top-level section (launcher.system_config.role_files)
READ_BY = {
    "kafka": "the trainers (train.yaml) and `up`'s generator and replay",
    "schema": "the trainers (train.yaml: records) and the service (through each bundle's schema)",
    "train": "the trainers (train.yaml)",
    "ps": "the shards (ps.yaml), the trainers' and the service's PS clients",
    "service": "the service (service.yaml)",
    "up": "`streamrec up` only",
    "logging": "every role (its file's logging section)",
}


def _segments(path: str) -> list[str]:
    return [re.sub(r"\[\d*\]$", "", s) for s in path.split(".")]


def _matches(key: list[str], path: list[str]) -> bool:
    return len(key) == len(path) and all(p == "<name>" or k == p for k, p in zip(key, path, strict=True))


def explain(key: str) -> str:
    """The text ``streamrec config explain KEY`` prints (module docstring)."""
    wanted = _segments(key.strip().replace("*", "<name>"))
    secs = sections()
    for sec in secs:
        for row in sec.rows:
            if _matches(wanted, _segments(row.path)):
                return _row_text(row, sec, next((s for s in secs if s.path and _matches(wanted, _segments(s.path))),
                                                None))
    known = [row.path for sec in secs for row in sec.rows]
    near = difflib.get_close_matches(key, known, n=3, cutoff=0.5)
    raise ConfigError(f"no config key {key!r}" + (f"; did you mean {', '.join(near)}?" if near else
                                                  " (streamrec config docs lists every key)"),
                      detail={"key": key, "near": near})


def _row_text(row: Row, holder: Section, section: Section | None) -> str:
    top = row.path.split(".")[0]
    lines = [row.path, f"  {row.description}", f"  type:       {row.type}", f"  default:    {row.default}",
             f"  defined in: {holder.model.__module__}.{holder.model.__qualname__}", f"  read by:    {READ_BY[top]}"]
    if section is not None:
        lines.append("  keys:")
        lines += [f"    {r.path.rsplit('.', 1)[-1]:<24} {r.type}, default {r.default}" for r in section.rows]
    return "\n".join(lines) + "\n"
