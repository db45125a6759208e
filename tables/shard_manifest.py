"""What a shard writes when it saves, and how a chain of saves is put back together.

One save is one directory::

    <save dir>/sparse/<table>/...   written by SparseTable.save (base or delta on a cursor)
    <save dir>/dense/<part>/...     written by DenseTable.save (always whole)
    <save dir>/shard.json           written LAST (atomic): shard index, mode, cursor, tables,
                                    dense parts with their optimizer; a save without it
                                    does not exist

The client may name the save dir (``PSClient.save(into="…/shard-{shard}")``), or the shard
keeps numbered saves under its ``--checkpoint-dir``::

    <root>/shard-000/MANIFEST.json   {"version": 1, "saves": ["000001-base", ...]} (atomic)
    <root>/shard-000/000001-base/    a save dir as above

Restoring a chain replays the newest base and every delta after it, in order; dense parts
come from the newest save.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tables.checkpoint import read_json, write_json
from tables.errors import CorruptData, NotFound

SAVE_MANIFEST = "shard.json"
MANAGED_MANIFEST = "MANIFEST.json"
FORMAT_VERSION = 1


def shard_dir(root: str | Path, index: int) -> Path:
    """The managed checkpoint directory of shard ``index`` under ``root``."""
    return Path(root) / f"shard-{index:03d}"


def write_save_manifest(save_dir: Path, info: dict[str, Any]) -> dict[str, Any]:
    """Write ``shard.json`` (the save's commit point); returns its file entry (name, bytes, crc32c)."""
    return write_json(save_dir / SAVE_MANIFEST, {"format": FORMAT_VERSION, **info})


def read_save_manifest(save_dir: Path) -> dict[str, Any]:
    man = read_json(save_dir / SAVE_MANIFEST)
    if man.get("format") != FORMAT_VERSION or man.get("mode") not in ("base", "delta"):
        raise CorruptData(f"{save_dir / SAVE_MANIFEST}: unsupported format or mode", detail={"dir": str(save_dir)})
    if not isinstance(man.get("sparse"), list) or not isinstance(man.get("dense"), dict):
        raise CorruptData(f"{save_dir / SAVE_MANIFEST}: malformed tables", detail={"dir": str(save_dir)})
    return man


def restore_plan(save_dirs: list[Path]) -> list[tuple[Path, dict[str, Any]]]:
    """(dir, manifest) to replay from ``save_dirs`` (oldest first): the newest base onwards.

    Directories without ``shard.json`` (never committed) are skipped.
    """
    saves = [(d, read_save_manifest(d)) for d in save_dirs if (d / SAVE_MANIFEST).is_file()]
    bases = [i for i, (_, man) in enumerate(saves) if man["mode"] == "base"]
    if not bases:
        raise NotFound(f"no complete base save among {[str(d) for d in save_dirs]}")
    return saves[bases[-1] :]


def managed_saves(directory: Path) -> list[Path]:
    """The committed save dirs of a managed shard directory, oldest first ([] when none)."""
    path = directory / MANAGED_MANIFEST
    if not path.exists():
        return []
    man = read_json(path)
    saves = man.get("saves")
    if man.get("version") != FORMAT_VERSION or not isinstance(saves, list):
        raise CorruptData(f"{path}: unsupported managed manifest", detail={"file": str(path)})
    for name in saves:
        if not isinstance(name, str) or Path(name).name != name or name in (".", ".."):
            raise CorruptData(f"{path}: bad save name {name!r}", detail={"file": str(path)})
    return [directory / name for name in saves]


def next_managed_dir(directory: Path, mode: str) -> Path:
    saves = managed_saves(directory)
    seq = int(saves[-1].name.split("-", 1)[0]) + 1 if saves else 1
    return directory / f"{seq:06d}-{mode}"


def commit_managed(directory: Path, save_dir: Path) -> None:
    """Append ``save_dir`` to the managed manifest (atomic), after its shard.json is written."""
    names = [p.name for p in managed_saves(directory)] + [save_dir.name]
    write_json(directory / MANAGED_MANIFEST, {"version": FORMAT_VERSION, "saves": names})
