"""A real small disk for the full-disk tests: a tmpfs mounted for the test (root may mount), filled
with a ballast file to run out of space, remounted read-only, and unmounted in teardown. The
mounts are libc calls, not mount(8): no process is started. A test run by another user runs
again as root of its own user and mount namespace (:func:`rerun_as_namespace_root`)."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
USER_NAMESPACE = ("unshare", "--user", "--map-root-user", "--mount")


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


def rerun_as_namespace_root(request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """Run the calling test again under ``unshare --user --map-root-user --mount``, where it is
    root of a private mount namespace (its mounts and the processes it starts see the tmpfs, no
    one else does), and fail with its output unless it passed there; fail naming what is missing
    where user namespaces are not allowed: a full-disk test must not skip."""
    probe = subprocess.run([*USER_NAMESPACE, "true"], capture_output=True, text=True) if shutil.which(
        "unshare") else None
    if probe is None or probe.returncode != 0:
        pytest.fail("this test mounts a small tmpfs to fill it: run it as root, or where unprivileged user "
                    "namespaces are allowed (`unshare --user --map-root-user --mount true` failed: "
                    f"{'no unshare on PATH' if probe is None else probe.stderr.strip()})", pytrace=False)
    # a basetemp of our own: the namespace's root does not own the real root's /tmp/pytest-of-root
    done = subprocess.run([*USER_NAMESPACE, sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           f"--basetemp={tmp_path / 'namespace'}", request.node.nodeid], cwd=REPO,
                          capture_output=True, text=True, timeout=280)
    output = done.stdout[-6000:] + done.stderr[-2000:]
    assert done.returncode == 0 and re.search(r"^1 passed", done.stdout, re.M), output
