"""A real small disk for the full-disk tests: a tmpfs mounted for the test (root may mount), filled
with a ballast file to run out of space, remounted read-only, and unmounted in teardown. The
mounts are libc calls, not mount(8): no process is started."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
from collections.abc import Iterator
from pathlib import Path


class SmallDisk:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.ballast = path / "ballast"

    def free_bytes(self) -> int:
        st = os.statvfs(self.path)
        return st.f_bavail * st.f_frsize

    def fill(self, leave: int = 0) -> None:
        """Write ballast until at most ``leave`` bytes are free (tmpfs counts whole pages)."""
        with open(self.ballast, "ab") as f:
            chunk = 1 << 20
            while chunk >= 4096:
                room = self.free_bytes() - leave
                if room < chunk:
                    chunk //= 2
                    continue
                try:
                    f.write(b"\0" * chunk)
                    f.flush()
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    chunk //= 2
        assert self.free_bytes() <= max(leave, 0) + 8192

    def free(self) -> None:
        self.ballast.unlink(missing_ok=True)

    def resize(self, size: str) -> None:
        _mount("tmpfs", self.path, MS_REMOUNT, f"size={size}")

    def read_only(self, on: bool) -> None:
        _mount("tmpfs", self.path, MS_REMOUNT | (MS_RDONLY if on else 0))


MS_RDONLY, MS_REMOUNT, MNT_DETACH = 1, 32, 2
_libc = ctypes.CDLL(None, use_errno=True)


def _mount(source: str, target: Path, flags: int, data: str = "") -> None:
    if _libc.mount(source.encode(), str(target).encode(), b"tmpfs", flags, data.encode() or None) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {target}: {os.strerror(err)}")


@contextlib.contextmanager
def small_disk(path: Path, size: str) -> Iterator[SmallDisk]:
    """A tmpfs of ``size`` (e.g. "8m") at ``path``; unmounted (lazily, if a process still holds a
    file there) when the test ends."""
    path.mkdir(parents=True, exist_ok=True)
    _mount("tmpfs", path, 0, f"size={size}")
    try:
        yield SmallDisk(path)
    finally:
        _libc.umount2(str(path).encode(), MNT_DETACH)


def can_mount() -> bool:
    return os.geteuid() == 0
