"""A write of pass-history.arrays that fails (a read-only file system, a full disk) does not stop
the chief: it is counted in the job's disk state, logged once, and the next commit writes the
whole series again, the missed point included (from its pass's manifest)."""

from __future__ import annotations

import contextlib
import errno
import logging
from collections.abc import Iterator
from pathlib import Path

from stores.store import DirectoryStore, open_store
from trainer import checkpoints, pass_history
from trainer.disk_space import DiskState

from .small_disk import can_mount, small_disk


def _point(n: int) -> dict:
    return {"pass": n, "time": 1000.0 + n, "records": 10, "records_total": 10 * n, "auc": 0.6, "lag": None}


def _commit(root: Path, n: int) -> dict:
    """Pass ``n`` complete, as far as the history reads it: a manifest carrying its point."""
    point = _point(n)
    open_store(str(root)).write_json(f"{checkpoints.pass_name(n)}/{checkpoints.MANIFEST}", {"progress": point})
    return point


class _FullStore(DirectoryStore):
    """Where no disk can be mounted: a local root whose history writes fail as a full disk's do."""

    full = True

    def write_bytes(self, rel, chunks):
        if self.full and rel == pass_history.HISTORY_FILE:
            raise OSError(errno.ENOSPC, "No space left on device")
        return super().write_bytes(rel, chunks)


def _failing_writes(root: Path, disk: DiskState, fail, heal) -> None:
    """Passes 1 and 2 recorded, 3 and 4 while ``fail`` holds, 5 after ``heal``."""
    for n in (1, 2):
        pass_history.record(root, _commit(root, n), disk=disk)
    before = (root / pass_history.HISTORY_FILE).read_bytes()
    committed = {n: _commit(root, n) for n in (3, 4)}  # the manifests went in before the disk failed
    fail()
    for n in (3, 4):
        points = pass_history.record(root, committed[n], disk=disk)  # no exception: training goes on
        assert points[-1]["pass"] == n
    assert (root / pass_history.HISTORY_FILE).read_bytes() == before  # the old series, intact
    assert disk.failures == {"pass_history": 2} and disk.status()["state"] == "full"
    assert disk.status()["failing"] == ["pass_history"]
    heal()
    pass_history.record(root, _commit(root, 5), disk=disk)
    assert [p["pass"] for p in pass_history.read(root)] == [1, 2, 3, 4, 5]  # nothing lost
    assert disk.status()["state"] == "ok" and disk.failures == {"pass_history": 2}
    assert not [p for p in root.iterdir() if p.name.endswith(".tmp")]  # no temp file left behind


@contextlib.contextmanager
def _warnings(name: str) -> Iterator[list[logging.LogRecord]]:
    """What logger ``name`` emits meanwhile (enabled even if an earlier test's logging setup disabled it)."""
    logger, records = logging.getLogger(name), []
    handler = logging.Handler(logging.WARNING)
    handler.emit = records.append
    was = logger.disabled
    logger.disabled = False
    logger.addHandler(handler)
    try:
        yield records
    finally:
        logger.removeHandler(handler)
        logger.disabled = was


def test_a_read_only_history_is_counted_logged_once_and_written_at_the_next_commit(tmp_path: Path) -> None:
    disk = DiskState()
    with _warnings("trainer.disk_space") as records:
        if can_mount():
            with small_disk(tmp_path / "disk", "4m") as d:
                _failing_writes(d.path, disk, lambda: d.read_only(True), lambda: d.read_only(False))
        else:  # the file and its directory read-only for a user that is not root
            root = tmp_path / "root"
            root.mkdir()
            _failing_writes(root, disk, lambda: root.chmod(0o555), lambda: root.chmod(0o755))
    failed = [r for r in records if "pass_history failed" in r.getMessage()]
    assert len(failed) == 1 and ("Read-only" in failed[0].getMessage() or "Permission" in failed[0].getMessage())


def test_a_full_disk_under_the_history_is_counted_and_the_series_comes_back(tmp_path: Path) -> None:
    disk = DiskState()
    if can_mount():
        with small_disk(tmp_path / "disk", "4m") as d:
            _failing_writes(d.path, disk, d.fill, d.free)
    else:
        root = tmp_path / "root"
        store = _FullStore(str(root), root)
        store.full = False

        def fail() -> None:
            store.full = True

        def heal() -> None:
            store.full = False

        for n in (1, 2):
            pass_history.record(store, _commit(root, n), disk=disk)
        fail()
        pass_history.record(store, _commit(root, 3), disk=disk)
        heal()
        pass_history.record(store, _commit(root, 4), disk=disk)
        assert [p["pass"] for p in pass_history.read(store)] == [1, 2, 3, 4]
    assert "No space left" in (disk.last_error or "")
