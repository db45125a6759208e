"""Bundle retention: the newest N bundles stay, with every bundle they or a service still need.

A delta is only loadable on top of its chain (its parent, back to a base), so keeping a bundle
keeps its chain. Besides the newest ``keep``, each service serving from the root pins the chain it
serves and the bundle it is loading through a marker file, ``.served-<name>.json`` (its model
store's versions, refreshed every poll): a service that has to rebuild its standby side replays
that chain, so it must not go. A marker not refreshed for :data:`MARKER_TTL_S` seconds is a
service that went away and pins nothing.

A bundle is deleted so that no reader meets half of one: on a local root it is renamed to
``.trash-<version>`` (one step; it leaves ``list_versions`` at once) and then removed; on an
object store its manifest goes first, which unpublishes it, then the rest. A service that listed
a bundle just before it went finds it missing and skips it (service.model_store).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from pathlib import Path

from core.errors import StreamrecError
from exports.bundle import MANIFEST, TRASH_PREFIX, list_versions
from stores.store import Store, open_store

log = logging.getLogger(__name__)

MARKER_PREFIX = ".served-"
MARKER_TTL_S = 600.0  # a service polls every few seconds: ten minutes of silence means it is gone


def chain_of(version: int, parents: dict[int, int | None]) -> list[int]:
    """``version`` and the bundles it applies on, newest first (``parents``: version -> its
    parent for a delta, None for a base; a version missing there ends the chain)."""
    out: list[int] = []
    v: int | None = version
    while v is not None and v in parents and v not in out:
        out.append(v)
        v = parents[v]
    return out


def plan(parents: dict[int, int | None], keep: int, pinned: set[int]) -> list[int]:
    """Versions to delete, oldest first: all but the newest ``keep`` and the ``pinned`` ones with their chains."""
    versions = sorted(parents)
    needed: set[int] = set()
    for v in [*versions[-keep:], *(p for p in pinned if p in parents)]:
        needed.update(chain_of(v, parents))
    return [v for v in versions if v not in needed]


def parents_of(store: Store, versions: list[int]) -> dict[int, int | None]:
    """Each published version's parent (None: a base, or a manifest that does not read, which
    nothing can apply on and so nothing needs)."""
    out: dict[int, int | None] = {}
    for v in versions:
        try:
            man = store.read_json(f"{v:010d}/{MANIFEST}")
        except (StreamrecError, OSError):
            out[v] = None
            continue
        parent = man.get("parent_version")
        out[v] = int(parent) if man.get("kind") == "delta" and isinstance(parent, int) else None
    return out


def pinned_versions(store: Store, *, now: float | None = None) -> set[int]:
    """Versions the services serving from this root pin (their fresh markers)."""
    now = time.time() if now is None else now
    out: set[int] = set()
    for name in store.list():
        if not name.startswith(MARKER_PREFIX):
            continue
        try:
            marker = store.read_json(name)
        except (StreamrecError, OSError):
            continue  # being replaced, or unreadable: the next retention reads it again
        at = marker.get("at")
        if store.local is not None:  # a local marker is kept fresh by its mtime (no disk space needed)
            with contextlib.suppress(OSError):
                at = max(float(at or 0.0), (store.local / name).stat().st_mtime)
        if isinstance(at, int | float) and now - at <= MARKER_TTL_S:
            out.update(int(v) for v in marker.get("versions", []) if isinstance(v, int))
    return out


def remove_bundle(store: Store, version: int) -> None:
    """Delete one bundle so that it leaves the listing in one step (the module docstring)."""
    name = f"{version:010d}"
    if store.local is not None:
        trash = store.local / f"{TRASH_PREFIX}{name}"
        with contextlib.suppress(FileNotFoundError):
            os.rename(store.local / name, trash)
        store.remove(trash.name)
    else:
        store.remove(f"{name}/{MANIFEST}")
        store.remove(name)


def retain(root: str | Path | Store, keep: int) -> list[int]:
    """Delete all bundles but the newest ``keep``, the pinned ones and their chains; the versions deleted."""
    store = open_store(root)
    versions = list_versions(store)
    if len(versions) <= keep:
        return []
    gone = plan(parents_of(store, versions), keep, pinned_versions(store))
    for v in gone:
        remove_bundle(store, v)
    return gone


def free_bytes(store: Store) -> int | None:
    """Bytes free to this user on a local root's file system (None: an object store)."""
    if store.local is None:
        return None
    path = store.local
    while not path.exists() and path != path.parent:  # a root made by its first write: its parent's disk
        path = path.parent
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def tree_bytes(path: Path) -> int:
    """Bytes of the files under ``path`` (files vanishing during the walk are skipped)."""
    total = 0
    for parent, _, files in os.walk(path):
        for f in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(parent, f)).st_size
    return total


class DiskUsage:
    """For each named root: ``<name>_free_bytes`` (its file system's) and ``<name>_bytes`` (its
    files'), None for an object store; read at most every ``every_s`` seconds (a scrape or a
    status call walks no tree more often)."""

    def __init__(self, roots: dict[str, Store], *, every_s: float = 5.0) -> None:
        self.roots, self.every_s = roots, every_s
        self._read_at: float | None = None
        self._last: dict[str, int | None] = {}
        self._lock = threading.Lock()

    def read(self) -> dict[str, int | None]:
        with self._lock:
            now = time.monotonic()
            if self._read_at is None or now - self._read_at >= self.every_s:
                out: dict[str, int | None] = {}
                for name, store in self.roots.items():
                    local = store.local
                    out[f"{name}_free_bytes"] = free_bytes(store)
                    out[f"{name}_bytes"] = tree_bytes(local) if local is not None and local.is_dir() else None
                self._last, self._read_at = out, now
            return dict(self._last)


class ServedMarker:
    """A service's marker (the module docstring): the versions it serves or loads, rewritten when
    they change and kept fresh every poll. A write that fails (a full disk) is counted and tried
    again at the next poll; a local marker is then kept fresh by touching it."""

    def __init__(self, root: str | Path | Store, name: str) -> None:
        self.store = open_store(root)
        self.name = f"{MARKER_PREFIX}{name}.json"
        self.versions: list[int] | None = None
        self.written_at = 0.0
        self.failures = 0

    def refresh(self, versions: list[int]) -> None:
        versions = sorted(set(versions))
        now = time.time()
        if versions == self.versions and now - self.written_at < MARKER_TTL_S / 4:
            if self.store.local is not None:
                with contextlib.suppress(OSError):
                    os.utime(self.store.local / self.name)
            return
        try:
            self.store.write_json(self.name, {"versions": versions, "at": now, "pid": os.getpid()})
        except (OSError, StreamrecError) as exc:
            self.failures += 1
            if self.failures == 1:
                log.warning("cannot write the served-bundle marker %s (retried every poll): %s",
                            self.store.url(self.name), exc)
            if self.store.local is not None:
                with contextlib.suppress(OSError):
                    os.utime(self.store.local / self.name)
            return
        self.versions, self.written_at = versions, now

    def remove(self) -> None:
        with contextlib.suppress(OSError, StreamrecError):
            self.store.remove(self.name)


def marker_name() -> str:
    """This process's marker name: host and pid, so replicas on one volume do not share one."""
    return f"{os.uname().nodename}-{os.getpid()}"

