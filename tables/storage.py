"""Checkpoint and export roots given as a local path or an fsspec URL.

The writers (tables.checkpoint, trainer.bundle) work on local directories: temp file,
fsync, rename. A root on an object store (``s3://bucket/prefix`` with s3fs installed,
``memory://`` in tests) is therefore *mirrored*: the process works in a local staging
directory and :meth:`StorageRoot.push` uploads what changed, every manifest after the
files it names, so a reader on another host never sees a manifest before its files;
:meth:`StorageRoot.pull` downloads the remote tree (same rule: files, then manifests) so a
restarted shard or a service on another host reads a complete checkpoint.

A plain path or a ``file://`` URL needs no mirroring: ``local`` is the root itself and
push/pull do nothing.

Manifests are the files readers trust first: ``MANIFEST.json`` (shard saves),
``*.manifest.json`` (table files) and ``bundle.json`` (inference bundles). Files whose name
starts with ``.`` are writers' temp files and never leave the host.
"""

from __future__ import annotations

import hashlib
import logging
import tempfile
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import unquote, urlparse

from tables.errors import ConfigError, Unavailable

log = logging.getLogger("streamrec.storage")

MANIFEST_NAMES = frozenset({"MANIFEST.json", "bundle.json"})
MANIFEST_SUFFIX = ".manifest.json"


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
    """Data files first, then manifests, deepest first (a table manifest before its shard's)."""
    paths = [p for p in relpaths if not PurePosixPath(p).name.startswith(".")]
    data = sorted(p for p in paths if not is_manifest(PurePosixPath(p).name))
    manifests = sorted((p for p in paths if is_manifest(PurePosixPath(p).name)),
                       key=lambda p: (-len(PurePosixPath(p).parts), p))
    return data + manifests


def _filesystem(location: str) -> tuple[Any, str]:
    try:
        import fsspec
    except ImportError:  # pragma: no cover - fsspec is a dependency
        raise ConfigError(f"{location}: URLs other than file:// need fsspec installed") from None
    try:
        fs, root = fsspec.core.url_to_fs(location)
    except (ImportError, ValueError) as exc:
        scheme = location.split("://", 1)[0]
        hint = " (pip install s3fs)" if scheme in ("s3", "s3a") else ""
        raise ConfigError(f"{location}: no filesystem for '{scheme}://'{hint}: {exc}") from None
    return fs, root.rstrip("/")


@dataclass
class StorageRoot:
    """One checkpoint or export root; use ``local`` for every read and write on this host."""

    location: str
    local: Path
    remote: tuple[Any, str] | None = None  # (fsspec filesystem, root path) when mirrored
    _pushed: dict[str, tuple[int, int]] = field(default_factory=dict)  # relpath -> (size, mtime_ns)

    @classmethod
    def open(cls, location: str, *, staging: str | Path | None = None) -> StorageRoot:
        """A root for ``location``; object-store roots stage in ``staging`` (default: a temp dir
        named after the URL, so a restart on the same host reuses it)."""
        path = local_path_of(location)
        if path is not None:
            path.mkdir(parents=True, exist_ok=True)
            return cls(location, path)
        remote = _filesystem(location)
        if staging is None:
            tag = hashlib.sha256(location.encode()).hexdigest()[:16]
            staging = Path(tempfile.gettempdir()) / f"streamrec-stage-{tag}"
        local = Path(staging)
        local.mkdir(parents=True, exist_ok=True)
        return cls(location, local, remote)

    @property
    def mirrored(self) -> bool:
        return self.remote is not None

    def _local_files(self) -> dict[str, tuple[int, int]]:
        out = {}
        for p in self.local.rglob("*"):
            if p.is_file() and not any(part.startswith(".") for part in p.relative_to(self.local).parts):
                st = p.stat()
                out[p.relative_to(self.local).as_posix()] = (st.st_size, st.st_mtime_ns)
        return out

    def push(self) -> int:
        """Upload files new or changed since the last push, manifests last; the number uploaded."""
        if self.remote is None:
            return 0
        fs, root = self.remote
        current = self._local_files()
        changed = [p for p, sig in current.items() if self._pushed.get(p) != sig]
        try:
            for rel in upload_order(changed):
                target = f"{root}/{rel}"
                fs.makedirs(target.rsplit("/", 1)[0], exist_ok=True)
                fs.put_file(str(self.local / rel), target)
                self._pushed[rel] = current[rel]
        except OSError as exc:
            raise Unavailable(f"{self.location}: upload failed: {exc}") from None
        return len(changed)

    def pull(self) -> int:
        """Download the remote tree into ``local`` (files, then manifests); the number downloaded."""
        if self.remote is None:
            return 0
        fs, root = self.remote
        try:
            if not fs.exists(root):
                return 0
            remote_files = [f for f in fs.find(root) if not fs.isdir(f)]
        except OSError as exc:
            raise Unavailable(f"{self.location}: listing failed: {exc}") from None
        prefix = root.strip("/") + "/"  # listings may or may not carry the leading "/"
        rels = [f.lstrip("/")[len(prefix):] for f in remote_files if f.lstrip("/").startswith(prefix)]
        count = 0
        for rel in upload_order(rels):
            dest = self.local / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            tmp = dest.with_name(f".{dest.name}.pull.tmp")
            fs.get_file(f"{root}/{rel}", str(tmp))
            tmp.replace(dest)
            st = dest.stat()
            self._pushed[rel] = (st.st_size, st.st_mtime_ns)  # already remote: no need to push back
            count += 1
        return count


class Mirror:
    """Keeps a mirrored root in step in the background: ``push`` (a writer's root: uploads what
    its atomic writers finished) or ``pull`` (a reader's root) every ``every_s`` seconds; a
    final push on stop. ``none`` only maps the root to its staging dir (a process that writes
    there while another one uploads). ``pull_first``: a writer that restores downloads first.
    Nothing to do (no thread) for local roots."""

    def __init__(self, root: StorageRoot, *, direction: str, every_s: float, pull_first: bool = False) -> None:
        if direction not in ("push", "pull", "none"):
            raise ValueError(f"direction must be push, pull or none, got {direction!r}")
        self.root = root
        self.direction = direction
        self.every_s = every_s
        self.pull_first = pull_first
        self.last_error: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"storage-{direction}", daemon=True)

    def _once(self, direction: str | None = None) -> None:
        try:
            if (direction or self.direction) == "push":
                self.root.push()
            else:
                self.root.pull()
            self.last_error = None
        except (Unavailable, OSError) as exc:  # keep trying: the store may come back
            self.last_error = str(exc)
            log.warning("%s %s: %s", self.direction, self.root.location, exc)

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            self._once()

    def __enter__(self) -> Path:
        if self.root.mirrored and self.direction != "none":
            if self.direction == "pull" or self.pull_first:
                self._once("pull")  # start from what is there
            self._thread.start()
        return self.root.local

    def __exit__(self, *exc: object) -> None:
        if self.root.mirrored and self.direction != "none":
            self._stop.set()
            self._thread.join(timeout=60)
            if self.direction == "push":
                self._once()  # what was written last goes up too


def mirrored(location: str, *, direction: str, every_s: float = 2.0, staging: str | Path | None = None,
             pull_first: bool = False) -> Mirror:
    """``with mirrored(url, direction="pull") as local_dir: ...`` (see :class:`Mirror`)."""
    return Mirror(StorageRoot.open(location, staging=staging), direction=direction, every_s=every_s,
                  pull_first=pull_first)
