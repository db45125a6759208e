"""Local copies of directories under a checkpoint or export root (stores.store), for code
that needs a local directory: a shard writes its save into one and uploads it
(:class:`StagedSave`), downloads the saves it restores (:func:`fetched`); the service loads
bundles from a local copy that :class:`Mirror` keeps in step. Local roots are used in place.
Uploads and downloads go files first, manifests last (stores.store.upload_order), so a
directory is never seen with its manifest but without the files it names.
"""

from __future__ import annotations

import hashlib
import logging
import shutil
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from core.errors import Unavailable
from stores.store import local_path_of, open_store

log = logging.getLogger("streamrec.storage")


def _scratch(scratch: Path | None) -> Path | None:
    if scratch is not None:
        Path(scratch).mkdir(parents=True, exist_ok=True)
    return scratch


class StagedSave:
    """Where a save for ``location`` is written on this host: the directory itself when it is
    local; else a scratch directory (under ``scratch``) that :meth:`upload` copies to
    ``location``, manifests last. :meth:`cleanup` deletes the scratch directory."""

    def __init__(self, location: str, *, scratch: Path | None = None) -> None:
        self.location = location
        path = local_path_of(location)
        self.remote = None if path is not None else open_store(location)
        self.local = path if path is not None else Path(tempfile.mkdtemp(prefix=".save-", dir=_scratch(scratch)))

    def upload(self) -> None:
        if self.remote is not None:
            self.remote.upload_tree(self.local, "")

    def cleanup(self) -> None:
        if self.remote is not None:
            shutil.rmtree(self.local, ignore_errors=True)


@contextmanager
def staged_save(location: str, *, scratch: Path | None = None) -> Iterator[Path]:
    """``with staged_save(url) as local: write...``: uploaded when the block ends without an
    error (see :class:`StagedSave`), the scratch directory deleted either way."""
    target = StagedSave(location, scratch=scratch)
    try:
        yield target.local
        target.upload()
    finally:
        target.cleanup()


@contextmanager
def fetched(locations: list[str], *, scratch: Path | None = None) -> Iterator[list[Path]]:
    """Local copies of the directories ``locations`` name (local ones as they are), for the block."""
    local = [local_path_of(loc) for loc in locations]
    if all(path is not None for path in local):
        yield [path for path in local if path is not None]
        return
    top = Path(tempfile.mkdtemp(prefix=".load-", dir=_scratch(scratch)))
    try:
        out = []
        for i, (loc, path) in enumerate(zip(locations, local, strict=True)):
            if path is None:
                path = top / f"{i:06d}"
                path.mkdir()
                open_store(loc).download_tree("", path)
            out.append(path)
        yield out
    finally:
        shutil.rmtree(top, ignore_errors=True)


class Mirror:
    """A reader's local copy of a root: downloads what is new every ``every_s`` seconds in the
    background (files before their manifests, so a local reader sees whole directories only).
    A local root is used in place: no copy, no thread."""

    def __init__(self, location: str, *, every_s: float, staging: str | Path | None = None) -> None:
        self.store = open_store(location)
        if self.store.local is not None:
            self.local = self.store.local
            self.local.mkdir(parents=True, exist_ok=True)
        else:
            if staging is None:  # named after the URL, so a restart on the same host reuses it
                tag = hashlib.sha256(location.encode()).hexdigest()[:16]
                staging = Path(tempfile.gettempdir()) / f"streamrec-stage-{tag}"
            self.local = Path(staging)
            self.local.mkdir(parents=True, exist_ok=True)
        self.every_s = every_s
        self.last_error: str | None = None
        self._known: dict[str, Any] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="storage-pull", daemon=True)

    def pull(self) -> int:
        """Download what changed since the last pull; the number of files."""
        try:
            n = self.store.download_tree("", self.local, self._known)
            self.last_error = None
            return n
        except (Unavailable, OSError) as exc:  # keep trying: the store may come back
            self.last_error = str(exc)
            log.warning("pull %s: %s", self.store.location, exc)
            return 0

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            self.pull()

    def __enter__(self) -> Path:
        if self.store.local is None:
            self.pull()  # start from what is there
            self._thread.start()
        return self.local

    def __exit__(self, *exc: object) -> None:
        if self._thread.is_alive():
            self._stop.set()
            self._thread.join(timeout=60)
