"""Child processes that die with their parent (Linux ``PR_SET_PDEATHSIG``).

A process started by a supervisor (``streamrec up``, the launcher, the embedded broker, a
prefetch process) must not outlive it: killed outright (``kill -9``), the supervisor cannot
stop anything, so the kernel must. :func:`die_with_parent` asks for ``sig`` when the parent
goes away; :func:`dies_with_parent` is the same as a ``subprocess.Popen(preexec_fn=...)``.

Two limits of the kernel feature, both handled or documented here:

- the signal follows the parent THREAD that started the child: start children from a thread
  that lives as long as they should (the main thread, or the thread that also stops them);
- a parent that dies between ``fork`` and the ``prctl`` call is missed by it: the child then
  checks that its parent is still the one that started it, and exits if not.

Elsewhere than Linux these are no-ops.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Callable

_PR_SET_PDEATHSIG = 1
# Loaded once here, not between fork and exec (no imports or dlopen in a preexec_fn).
_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None


def die_with_parent(sig: int = signal.SIGKILL, *, parent: int | None = None) -> None:
    """Ask the kernel to send ``sig`` to this process when its parent ends. ``parent``: the pid
    that started this process; if it is already gone, exit at once (status 1)."""
    if _LIBC is None:
        return
    _LIBC.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    if parent is not None and os.getppid() != parent:
        os._exit(1)


def dies_with_parent(sig: int = signal.SIGKILL) -> Callable[[], None]:
    """A ``preexec_fn`` for ``subprocess.Popen``: the child gets ``sig`` when this process ends."""
    parent = os.getpid()

    def arm() -> None:
        die_with_parent(sig, parent=parent)

    return arm
