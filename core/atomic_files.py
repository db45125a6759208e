"""Checkpoint files: atomic writes, checksums, manifests.

Every file is written under a temporary name, fsynced, renamed into place, and its
directory fsynced; its size and CRC-32C go into a manifest written last the same way. A
reader verifies size and checksum of every file before anything is applied, so a torn or
corrupted checkpoint is refused with an error naming the file, never half-loaded.

Array files (state, tombstones) are a small self-describing container: an 8-byte magic, an
8-byte little-endian header length, a JSON header ``{"arrays": [{name, dtype, shape,
offset, nbytes}]}`` and the raw array bytes. No pickle anywhere.
"""

from __future__ import annotations

import json
import os
import struct
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from core.errors import CorruptData

FORMAT_VERSION = 1
ARRAYS_MAGIC = b"SRARRAY1"


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class AtomicWriter:
    """Write a file under a temp name; ``commit()`` fsyncs and renames it into place."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
        self._f = open(self.tmp, "wb")  # noqa: SIM115 - closed in commit/abort
        self.size = 0
        self.crc = 0

    def write(self, data: bytes | memoryview | np.ndarray) -> None:
        if isinstance(data, np.ndarray):
            if data.nbytes == 0:
                return
            buf = memoryview(np.ascontiguousarray(data).reshape(-1).view(np.uint8))
        else:
            buf = data
        self._f.write(buf)
        self.crc = _crc32c(buf, self.crc)
        self.size += len(buf)

    def commit(self) -> dict[str, Any]:
        self._f.flush()
        os.fsync(self._f.fileno())
        self._f.close()
        os.replace(self.tmp, self.path)
        fsync_dir(self.path.parent)
        return {"file": self.path.name, "bytes": self.size, "crc32c": self.crc}

    def abort(self) -> None:
        try:
            self._f.close()  # flushes what is buffered: on a full disk that fails too
        finally:
            self.tmp.unlink(missing_ok=True)

    def __enter__(self) -> AtomicWriter:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is not None:
            self.abort()


def write_bytes(path: Path, chunks: Iterable[bytes | memoryview | np.ndarray]) -> dict[str, Any]:
    with AtomicWriter(path) as w:
        for c in chunks:
            w.write(c)
        return w.commit()


def encode_json(obj: dict[str, Any]) -> bytes:
    """A manifest's bytes (stable: sorted keys)."""
    return json.dumps(obj, indent=1, sort_keys=True).encode()


def write_json(path: Path, obj: dict[str, Any]) -> dict[str, Any]:
    return write_bytes(path, [encode_json(obj)])


def parse_json(data: bytes, where: str) -> dict[str, Any]:
    """A manifest's bytes as an object (CorruptData names ``where``)."""
    try:
        obj = json.loads(data)
    except ValueError as exc:
        raise CorruptData(f"{where}: unreadable manifest ({exc})", detail={"file": where}) from None
    if not isinstance(obj, dict):
        raise CorruptData(f"{where}: manifest is not an object", detail={"file": where})
    return obj


def read_json(path: Path) -> dict[str, Any]:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise CorruptData(f"{path}: manifest missing", detail={"file": str(path)}) from None
    except OSError as exc:
        raise CorruptData(f"{path}: unreadable manifest ({exc})", detail={"file": str(path)}) from None
    return parse_json(data, str(path))


def entry_file(directory: object, entry: dict[str, Any]) -> tuple[str, int, int]:
    """(name, bytes, crc32c) of a manifest's file entry; the name must be a file beside the manifest."""
    try:
        name = str(entry["file"])
        size, crc = int(entry["bytes"]), int(entry["crc32c"])
    except (KeyError, TypeError, ValueError):
        raise CorruptData(f"{directory}: malformed file entry in manifest: {entry!r}") from None
    if not name or Path(name).name != name or name in (".", ".."):
        # A manifest names files beside it, never elsewhere (no "../x", no absolute paths).
        raise CorruptData(f"{directory}: manifest names a file outside its directory: {name!r}")
    return name, size, crc


def check_bytes(buf: bytes | memoryview | np.ndarray, size: int, crc: int, where: str) -> None:
    """CorruptData unless ``buf`` has the size and CRC-32C its manifest gives."""
    if len(buf) != size:
        raise CorruptData(f"{where}: size {len(buf)} bytes, manifest says {size} (truncated or overwritten)",
                          detail={"file": where})
    if _crc32c(buf) != crc:
        raise CorruptData(f"{where}: checksum mismatch (corrupted)", detail={"file": where})


def read_verified(directory: Path, entry: dict[str, Any]) -> memoryview:
    """Read a file named by a manifest entry, checking its size and CRC-32C."""
    name, size, crc = entry_file(directory, entry)
    path = directory / name
    try:
        actual = path.stat().st_size
        if actual != size:
            raise CorruptData(f"{path}: size {actual} bytes, manifest says {size} (truncated or overwritten)",
                              detail={"file": str(path)})
        buf = np.empty(size, np.uint8)  # not zero-filled: read straight into fresh pages
        with open(path, "rb") as f:
            got = f.readinto(memoryview(buf))
    except FileNotFoundError:
        raise CorruptData(f"{path}: file missing", detail={"file": str(path)}) from None
    check_bytes(buf[:got], size, crc, str(path))
    return memoryview(buf)


def encode_arrays(arrays: dict[str, np.ndarray]) -> list[bytes | np.ndarray]:
    """Chunks of an array container (see module docstring)."""
    entries, offset = [], 0
    for name, a in arrays.items():
        entries.append({"name": name, "dtype": a.dtype.str, "shape": list(a.shape), "offset": offset,
                        "nbytes": a.nbytes})
        offset += a.nbytes
    header = json.dumps({"arrays": entries}).encode()
    return [ARRAYS_MAGIC, struct.pack("<Q", len(header)), header, *(np.ascontiguousarray(a) for a in arrays.values())]


def decode_arrays(buf: memoryview, source: str) -> dict[str, np.ndarray]:
    """Arrays of a verified container (copies, so the caller owns them)."""
    try:
        if bytes(buf[:8]) != ARRAYS_MAGIC:
            raise ValueError("bad magic")
        (hlen,) = struct.unpack("<Q", buf[8:16])
        header = json.loads(bytes(buf[16 : 16 + hlen]))
        base = 16 + hlen
        out = {}
        for e in header["arrays"]:
            dt = np.dtype(e["dtype"])
            if dt.hasobject:
                raise ValueError("object arrays are not allowed")
            start = base + int(e["offset"])
            raw = buf[start : start + int(e["nbytes"])]
            if len(raw) != int(e["nbytes"]):
                raise ValueError(f"array {e['name']} runs past the end")
            out[e["name"]] = np.frombuffer(raw, dt).reshape(e["shape"]).copy()
        return out
    except (ValueError, KeyError, TypeError, struct.error) as exc:
        raise CorruptData(f"{source}: malformed array file ({exc})", detail={"file": source}) from None


def _crc32c(buf: bytes | memoryview | np.ndarray, value: int = 0) -> int:
    import crc32c  # here: a process that never writes or checks a file (a worker of a file job) does not load it

    return int(crc32c.crc32c(buf, value))
