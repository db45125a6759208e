"""Checkpoint and export roots given as a local path or an fsspec URL, and what atomic means there.

:func:`open_store` turns a root (``/data/ck``, ``file:///data/ck``, ``s3://bucket/ck`` with s3fs
installed, ``memory://`` in tests) into a :class:`Store`: files named relative to the root are
read, written, listed and removed the same way on every host. The trainer's passes
(trainer.checkpoints) and bundles (exports.bundle) go through it, so shards, trainers and the
service need no shared filesystem, only the same URL.

Atomicity. On a local root every file is written under a temp name, fsynced and renamed
(core.atomic_files). An object store has no rename, but one PUT is atomic: an object is
there whole or not at all, and S3 (and S3-compatible stores) read after write consistently.
So there every *file* is atomic and a *directory* is not; what makes a directory exist is its
manifest, written last: ``pass.json`` (a pass), ``bundle.json`` (a bundle), ``shard.json``
(a shard's save), ``MANIFEST.json`` and ``*.manifest.json`` (table files). Trees are uploaded
data files first and manifests last, deepest first (:func:`upload_order`), and readers trust
a directory only once its manifest is there and every file it names has the size and
CRC-32C the manifest records. A directory without its manifest is a write that died half
way: readers skip it and the writer deletes it when it starts again.

Code that needs a local directory (a shard saving its tables, the service loading bundles)
works in a local one and moves trees with :meth:`Store.upload_tree` /
:meth:`Store.download_tree` (stores.staging).

Endpoint and credentials of an object store come from the environment, as for every AWS
client: ``AWS_ENDPOINT_URL`` (an S3-compatible server), ``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_DEFAULT_REGION``; nothing secret is in the YAML.
"""

from __future__ import annotations

import shutil
from abc import ABC, abstractmethod
from collections.abc import Iterable
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import unquote, urlparse

import numpy as np

from core.atomic_files import (
    check_bytes,
    encode_json,
    entry_file,
    parse_json,
    read_json,
    read_verified,
    write_bytes,
    write_json,
)
from core.errors import ConfigError, CorruptData, Unavailable

MANIFEST_NAMES = frozenset({"MANIFEST.json", "shard.json", "pass.json", "bundle.json"})
MANIFEST_SUFFIX = ".manifest.json"
Chunk = bytes | memoryview | np.ndarray


def is_manifest(name: str) -> bool:
    return name in MANIFEST_NAMES or name.endswith(MANIFEST_SUFFIX)


def local_path_of(location: str) -> Path | None:
    """The local directory a plain path or ``file://`` URL names; None for any other URL."""
    if "://" not in location:
        return Path(location)
    parsed = urlparse(location)
    if parsed.scheme == "file":
        if parsed.netloc not in ("", "localhost"):
            raise ConfigError(f"{location}: file:// URLs name a local path (file:///abs/path)")
        return Path(unquote(parsed.path))
    return None


def upload_order(relpaths: Iterable[str]) -> list[str]:
    """Data files first, then manifests, deepest first (a table manifest before its save's)."""
    paths = [p for p in relpaths if not PurePosixPath(p).name.startswith(".")]
    data = sorted(p for p in paths if not is_manifest(PurePosixPath(p).name))
    manifests = sorted((p for p in paths if is_manifest(PurePosixPath(p).name)),
                       key=lambda p: (-len(PurePosixPath(p).parts), p))
    return data + manifests


def _local_files(directory: Path) -> list[str]:
    """Relative paths of the files under ``directory``, writers' temp files (``.name``) left out."""
    out = []
    for p in directory.rglob("*"):
        rel = p.relative_to(directory)
        if p.is_file() and not any(part.startswith(".") for part in rel.parts):
            out.append(rel.as_posix())
    return out


def _join(*parts: str) -> str:
    return "/".join(p.strip("/") for p in parts if p.strip("/"))


class Store(ABC):
    """One root; ``rel`` paths are ``/``-separated and relative to it."""

    location: str
    local: Path | None  # the root itself when it is a local directory

    @abstractmethod
    def url(self, rel: str = "") -> str:
        """How another process names ``rel`` (a path or a URL: what shards are sent)."""
        raise NotImplementedError

    @abstractmethod
    def exists(self, rel: str) -> bool:
        raise NotImplementedError

    @abstractmethod
    def list(self, rel: str = "") -> list[str]:
        """Names of the files and directories in ``rel`` (empty when it does not exist)."""
        raise NotImplementedError

    @abstractmethod
    def remove(self, rel: str) -> None:
        """Delete ``rel`` and everything under it; nothing when it does not exist."""
        raise NotImplementedError

    @abstractmethod
    def read_bytes(self, rel: str) -> bytes:
        """The file's contents (FileNotFoundError when it is not there)."""
        raise NotImplementedError

    @abstractmethod
    def write_bytes(self, rel: str, chunks: Iterable[Chunk]) -> dict[str, Any]:
        """Write one file atomically; its manifest entry (file, bytes, crc32c)."""
        raise NotImplementedError

    @abstractmethod
    def read_verified(self, rel_dir: str, entry: dict[str, Any]) -> memoryview:
        """The file a manifest entry names in ``rel_dir``, checked against its size and CRC-32C."""
        raise NotImplementedError

    @abstractmethod
    def upload_tree(self, local: Path, rel: str) -> int:
        """Copy a local directory to ``rel`` (manifests last); the number of files."""
        raise NotImplementedError

    @abstractmethod
    def download_tree(self, rel: str, local: Path, known: dict[str, Any] | None = None) -> int:
        """Copy ``rel`` into a local directory (manifests last); the number of files copied.
        ``known`` (relpath -> signature, updated): files unchanged since then are skipped."""
        raise NotImplementedError

    def write_json(self, rel: str, obj: dict[str, Any]) -> dict[str, Any]:
        return self.write_bytes(rel, [encode_json(obj)])

    def read_json(self, rel: str) -> dict[str, Any]:
        """A manifest (CorruptData when missing or unreadable)."""
        try:
            data = self.read_bytes(rel)
        except FileNotFoundError:
            raise CorruptData(f"{self.url(rel)}: manifest missing", detail={"file": self.url(rel)}) from None
        except OSError as exc:
            raise CorruptData(f"{self.url(rel)}: unreadable manifest ({exc})", detail={"file": self.url(rel)}) from None
        return parse_json(data, self.url(rel))

    def __str__(self) -> str:
        return self.location


class DirectoryStore(Store):
    """A directory on this host: temp file, fsync, rename."""

    def __init__(self, location: str, path: Path) -> None:
        self.location = location
        self.local = path  # created by the first write
        self._root = path  # the same, typed as never None

    def _p(self, rel: str) -> Path:
        return self._root / rel if rel else self._root

    def url(self, rel: str = "") -> str:
        return str(self._p(rel))

    def exists(self, rel: str) -> bool:
        return self._p(rel).exists()

    def list(self, rel: str = "") -> list[str]:
        p = self._p(rel)
        return sorted(c.name for c in p.iterdir()) if p.is_dir() else []

    def remove(self, rel: str) -> None:
        p = self._p(rel)
        if p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)

    def read_bytes(self, rel: str) -> bytes:
        return self._p(rel).read_bytes()

    def write_bytes(self, rel: str, chunks: Iterable[Chunk]) -> dict[str, Any]:
        p = self._p(rel)
        p.parent.mkdir(parents=True, exist_ok=True)
        return write_bytes(p, chunks)

    def write_json(self, rel: str, obj: dict[str, Any]) -> dict[str, Any]:
        p = self._p(rel)
        p.parent.mkdir(parents=True, exist_ok=True)
        return write_json(p, obj)

    def read_json(self, rel: str) -> dict[str, Any]:
        return read_json(self._p(rel))

    def read_verified(self, rel_dir: str, entry: dict[str, Any]) -> memoryview:
        return read_verified(self._p(rel_dir), entry)

    def upload_tree(self, local: Path, rel: str) -> int:
        shutil.copytree(local, self._p(rel), dirs_exist_ok=True)
        return len(_local_files(local))

    def download_tree(self, rel: str, local: Path, known: dict[str, Any] | None = None) -> int:
        if not self._p(rel).is_dir():
            return 0
        shutil.copytree(self._p(rel), local, dirs_exist_ok=True)
        return len(_local_files(local))


class ObjectStore(Store):
    """A root on an fsspec filesystem (s3://, gs://, memory://, ...): one PUT per file."""

    def __init__(self, location: str, fs: Any, root: str) -> None:
        self.location = location.rstrip("/")
        self.local = None
        self.fs = fs
        self.root = root.rstrip("/")

    def _p(self, rel: str) -> str:
        return _join(self.root, rel) if rel else self.root

    def url(self, rel: str = "") -> str:
        return f"{self.location}/{rel.strip('/')}" if rel else self.location

    def _fresh(self, rel: str) -> str:
        # fsspec filesystems cache listings; another host may have written since
        path = self._p(rel)
        self.fs.invalidate_cache(path)
        return path

    def _call(self, what: str, rel: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except FileNotFoundError:
            raise
        except OSError as exc:
            raise Unavailable(f"{self.url(rel)}: {what} failed: {exc}") from None

    def exists(self, rel: str) -> bool:
        path = self._fresh(rel)
        return bool(self._call("stat", rel, self.fs.exists, path))

    def list(self, rel: str = "") -> list[str]:
        path = self._fresh(rel)
        try:
            entries = self._call("listing", rel, self.fs.ls, path, detail=False)
        except FileNotFoundError:
            return []
        return sorted({PurePosixPath(e.rstrip("/")).name for e in entries} - {""})

    def remove(self, rel: str) -> None:
        path = self._fresh(rel)
        if self.fs.exists(path):
            self._call("delete", rel, self.fs.rm, path, recursive=True)
        self.fs.invalidate_cache(path)

    def read_bytes(self, rel: str) -> bytes:
        return bytes(self._call("read", rel, self.fs.cat_file, self._fresh(rel)))

    def write_bytes(self, rel: str, chunks: Iterable[Chunk]) -> dict[str, Any]:
        import crc32c

        path = self._p(rel)
        size, crc = 0, 0

        def write() -> None:
            nonlocal size, crc
            with self.fs.open(path, "wb") as f:  # the object appears when this closes (one PUT or one multipart)
                for c in chunks:
                    buf = memoryview(np.ascontiguousarray(c).reshape(-1).view(np.uint8)) \
                        if isinstance(c, np.ndarray) else c
                    if len(buf):
                        f.write(buf)
                        crc = crc32c.crc32c(buf, crc)
                        size += len(buf)

        self._call("upload", rel, write)
        self.fs.invalidate_cache(path)
        return {"file": PurePosixPath(rel).name, "bytes": size, "crc32c": crc}

    def read_verified(self, rel_dir: str, entry: dict[str, Any]) -> memoryview:
        name, size, crc = entry_file(self.url(rel_dir), entry)
        rel = _join(rel_dir, name)
        try:
            data = self.read_bytes(rel)
        except FileNotFoundError:
            raise CorruptData(f"{self.url(rel)}: file missing", detail={"file": self.url(rel)}) from None
        check_bytes(data, size, crc, self.url(rel))
        return memoryview(data)

    def upload_tree(self, local: Path, rel: str) -> int:
        files = upload_order(_local_files(local))
        made: set[str] = set()
        for f in files:
            target = _join(self._p(rel), f)
            parent = target.rsplit("/", 1)[0]
            if parent not in made:  # object stores need no directories; other fsspec filesystems do
                self._call("mkdir", rel, self.fs.makedirs, parent, exist_ok=True)
                made.add(parent)
            self._call("upload", rel, self.fs.put_file, str(local / f), target)
        self.fs.invalidate_cache(self._p(rel))
        return len(files)

    def download_tree(self, rel: str, local: Path, known: dict[str, Any] | None = None) -> int:
        top = self._fresh(rel)
        try:
            listing = self._call("listing", rel, self.fs.find, top, detail=True)
        except FileNotFoundError:
            return 0
        prefix = top.strip("/") + "/"  # listings may or may not carry the leading "/"
        infos = {}
        for name, info in listing.items():
            path = name.lstrip("/")
            if info.get("type") != "directory" and path.startswith(prefix):
                # what changes when an object is rewritten: its ETag (S3) or its time (other stores)
                infos[path[len(prefix):]] = (info.get("size"), info.get("ETag") or info.get("mtime")
                                             or info.get("LastModified") or info.get("created"))
        count = 0
        for f in upload_order(infos):
            if known is not None and known.get(f) == infos[f]:
                continue
            dest = local / f
            dest.parent.mkdir(parents=True, exist_ok=True)
            tmp = dest.with_name(f".{dest.name}.pull.tmp")
            self._call("download", rel, self.fs.get_file, _join(top, f), str(tmp))
            tmp.replace(dest)
            if known is not None:
                known[f] = infos[f]
            count += 1
        return count


def open_store(root: str | Path | Store) -> Store:
    """The store of a root: a path, a ``file://`` URL or any fsspec URL (``s3://`` needs s3fs)."""
    if isinstance(root, Store):
        return root
    location = str(root)
    path = local_path_of(location)
    if path is not None:
        return DirectoryStore(location, path)
    try:
        import fsspec

        fs, fs_root = fsspec.core.url_to_fs(location)
    except (ImportError, ValueError) as exc:
        scheme = location.split("://", 1)[0]
        hint = " (pip install 'streamrec[s3]')" if scheme in ("s3", "s3a") else ""
        raise ConfigError(f"{location}: no filesystem for '{scheme}://'{hint}: {exc}") from None
    return ObjectStore(location, fs, fs_root)


def read_file(location: str) -> bytes:
    """The bytes of one file named by a path or URL (FileNotFoundError when it is not there)."""
    parent, _, name = location.rstrip("/").rpartition("/")
    return open_store(parent or ".").read_bytes(name)
