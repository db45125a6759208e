"""What a shard writes when it saves, and how a chain of saves is put back together.

One save is one directory::

    <save dir>/sparse/<table>/...   written by SparseTable.save (base or delta on a cursor)
    <save dir>/dense/<part>/...     written by DenseTable.save (always whole)
    <save dir>/shard.json           written LAST (atomic): shard index, mode, cursor, tables,
                                    dense parts with their optimizer; a save without it
                                    does not exist

The client may name the save dir (``PSAdmin.save(into="…/shard-{shard}")``), or the shard
keeps numbered saves under its ``--checkpoint-dir``::

    <root>/shard-000/MANIFEST.json   {"version": 1, "saves": ["000001-base", ...]} (atomic)
    <root>/shard-000/000001-base/    a save dir as above

The managed manifest also lists (by absolute path) the client-named saves on the
"checkpoint" cursor, so a restarted shard comes back from its newest checkpoint whoever
named the directory. It keeps only the newest base and the deltas after it.

Restoring a chain replays the newest base and every delta after it, in order; dense parts
come from the newest save. It is all or nothing as far as the files go: every file of every
table of the chain is checked against its manifest (size, CRC-32C; :func:`verify_plan`)
before any table is loaded, so a corrupt file leaves the shard's tables as they were and the
error names the file.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import crc32c

from core.atomic_files import entry_file, read_json, write_json
from core.errors import CorruptData, NotFound

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


def verify_plan(plan: list[tuple[Path, dict[str, Any]]], sparse: set[str]) -> None:
    """CorruptData naming the first file of ``plan`` (what :func:`restore_plan` returned) whose
    size or CRC-32C is not what its manifest says: the tables in ``sparse`` of every save,
    the dense parts of the last. Reads every file once, a chunk at a time."""
    for i, (save_dir, man) in enumerate(plan):
        dirs = [save_dir / "sparse" / name for name in man["sparse"] if name in sparse]
        if i == len(plan) - 1:
            dirs += [save_dir / "dense" / name for name in man["dense"]]
        for table_dir in dirs:
            manifests = sorted(table_dir.glob("*.manifest.json"))
            if not manifests:
                raise CorruptData(f"{table_dir}: no table manifest in a committed save",
                                  detail={"file": str(table_dir)})
            for mpath in manifests:
                files = read_json(mpath).get("files")
                if not isinstance(files, dict):
                    raise CorruptData(f"{mpath}: manifest lists no files", detail={"file": str(mpath)})
                for entry in files.values():
                    _verify_file(table_dir, entry)


_CHUNK = 1 << 22


def _verify_file(directory: Path, entry: Any) -> None:
    if not isinstance(entry, dict):
        raise CorruptData(f"{directory}: malformed file entry in manifest: {entry!r}", detail={"file": str(directory)})
    name, size, crc = entry_file(directory, entry)
    path = directory / name
    seen, got = 0, 0
    try:
        with open(path, "rb") as f:
            while chunk := f.read(_CHUNK):
                seen += len(chunk)
                got = crc32c.crc32c(chunk, got)
    except OSError as exc:
        raise CorruptData(f"{path}: unreadable ({exc.strerror})", detail={"file": str(path)}) from None
    if seen != size:
        raise CorruptData(f"{path}: size {seen} bytes, manifest says {size} (truncated or overwritten)",
                          detail={"file": str(path)})
    if got != crc:
        raise CorruptData(f"{path}: checksum mismatch (corrupted)", detail={"file": str(path)})


def managed_saves(directory: Path) -> list[Path]:
    """The committed save dirs of a managed shard directory, oldest first ([] when none)."""
    path = directory / MANAGED_MANIFEST
    if not path.exists():
        return []
    man = read_json(path)
    saves = man.get("saves")
    if man.get("version") != FORMAT_VERSION or not isinstance(saves, list):
        raise CorruptData(f"{path}: unsupported managed manifest", detail={"file": str(path)})
    if not all(isinstance(name, str) and name not in ("", ".", "..") for name in saves):
        raise CorruptData(f"{path}: bad save names {saves!r}", detail={"file": str(path)})
    return [directory / name for name in saves]  # absolute names stay as they are


def next_managed_dir(directory: Path, mode: str) -> Path:
    numbered = sorted(p.name for p in directory.glob("[0-9]" * 6 + "-*")) if directory.is_dir() else []
    seq = int(numbered[-1].split("-", 1)[0]) + 1 if numbered else 1
    return directory / f"{seq:06d}-{mode}"


def commit_managed(directory: Path, save_dir: Path, mode: str) -> None:
    """Record ``save_dir`` in the managed manifest (atomic), after its shard.json is written.
    A base starts the list afresh (older saves are no longer needed to restore)."""
    name = save_dir.name if save_dir.parent == directory else str(save_dir.resolve())
    names = [] if mode == "base" else [str(p.relative_to(directory)) if p.parent == directory else str(p)
                                       for p in managed_saves(directory)]
    directory.mkdir(parents=True, exist_ok=True)
    write_json(directory / MANAGED_MANIFEST, {"version": FORMAT_VERSION, "saves": [*names, name]})
    if mode == "base":  # numbered saves before this base are no longer needed
        for old in directory.glob("[0-9]" * 6 + "-*"):
            if old != save_dir:
                shutil.rmtree(old, ignore_errors=True)
