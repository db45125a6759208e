"""A full disk is a degraded state of the job, not a crash.

A write that fails for want of space (ENOSPC, EDQUOT) or on a failing device (EIO) is counted
here by what it wrote, logged once until that write succeeds again, and tried again later: a
worker's pass part until it is written (training pauses meanwhile, so nothing past the last
complete pass is committed), a pass the shards could not save by going back to the last complete
pass and training its records again once a part can be written, a bundle at the next pass, the
pass history at the next commit. The job's status says ``disk: full`` while any of them fails,
with the free and used bytes of the checkpoint and export roots.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from core.errors import DISK_FULL_ERRNOS, DISK_FULL_TEXT, StreamrecError

log = logging.getLogger(__name__)

RETRY_MIN_S = 0.5
RETRY_MAX_S = 10.0  # a paused worker looks for space again at least this often


def is_disk_full(exc: BaseException | None) -> bool:
    """``exc`` (or what caused it) is a write that failed for want of space or on a failing device."""
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, OSError) and exc.errno in DISK_FULL_ERRNOS:
            return True
        if isinstance(exc, StreamrecError) and any(t in exc.message for t in DISK_FULL_TEXT):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


class DiskState:
    """Failed writes by what they wrote (thread-safe: the finisher and export threads report too)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.failures: dict[str, int] = {}  # what -> writes failed for want of space, ever
        self.failing: dict[str, float] = {}  # what -> since when it fails (cleared when it succeeds)
        self.last_error: str | None = None

    def failed(self, what: str, exc: BaseException) -> None:
        text = getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
        with self._lock:
            self.failures[what] = self.failures.get(what, 0) + 1
            first = what not in self.failing
            self.failing.setdefault(what, time.time())
            self.last_error = f"{what}: {text}"
        if first:
            log.warning("disk full: %s failed (%s); training goes on degraded and tries again", what, text)

    def ok(self, what: str) -> None:
        with self._lock:
            since = self.failing.pop(what, None)
        if since is not None:
            log.info("disk: %s written again after %.0f s", what, time.time() - since)  # resumed: no warning

    @property
    def full(self) -> bool:
        return bool(self.failing)

    def status(self) -> dict[str, Any]:
        with self._lock:
            return {"state": "full" if self.failing else "ok", "failing": sorted(self.failing),
                    "since": min(self.failing.values()) if self.failing else None,
                    "failures": dict(self.failures), "last_error": self.last_error}


def wait_retry(stopping: threading.Event, attempt: int) -> bool:
    """Wait before try ``attempt`` + 1 of a failed write; False when the job stops meanwhile."""
    return not stopping.wait(min(RETRY_MIN_S * 2.0**attempt, RETRY_MAX_S))

