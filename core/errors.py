"""The one error hierarchy of streamrec.

Every layer raises subclasses of :class:`StreamrecError`. Each class carries a stable
machine-readable ``code`` and the HTTP status the service maps it to, so the service needs
exactly one exception handler and the PS wire protocol can send ``code`` back to clients.
"""

from __future__ import annotations

import errno
import os
from typing import Any


class StreamrecError(Exception):
    """Base class: a clear message, a stable code, optional structured detail."""

    code: str = "internal_error"
    http_status: int = 500

    def __init__(self, message: str, *, detail: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail or {}

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "detail": self.detail}


class ConfigError(StreamrecError):
    """A configuration file or value is invalid (names the file and key)."""

    code = "config_error"
    http_status = 400


class InvalidInput(StreamrecError):
    """A request or batch is malformed: wrong dtype, shape, range or type."""

    code = "invalid_input"
    http_status = 422


class NonFiniteGradient(InvalidInput):
    """A pushed gradient holds NaN or Inf and the table is configured to reject it."""

    code = "non_finite_gradient"


class RequestTimeout(InvalidInput):
    """A client did not send its request (the whole body) within the server's deadline."""

    code = "request_timeout"
    http_status = 408


class NotFound(StreamrecError):
    """A named table, pass, bundle or id does not exist."""

    code = "not_found"
    http_status = 404


class CorruptData(StreamrecError):
    """A checkpoint, export or record failed its checksum or structural checks."""

    code = "corrupt_data"
    http_status = 422


class Conflict(StreamrecError):
    """An operation does not fit the current state (e.g. a delta applied out of order)."""

    code = "conflict"
    http_status = 409


class Unavailable(StreamrecError):
    """A remote component (shard, broker) did not answer in time."""

    code = "unavailable"
    http_status = 503


class ShardRestarted(Unavailable):
    """A PS shard answered with another incarnation than before: it restarted since this
    client last heard from it, and its tables came back from its last save (or empty), so
    updates made since then are gone. Raised once per restart; the worker regroups."""

    code = "shard_restarted"

    def __init__(self, message: str, *, detail: dict[str, Any] | None = None) -> None:
        super().__init__(message, detail=detail)
        self.shard = self.detail.get("shard")
        self.old = self.detail.get("old")
        self.new = self.detail.get("new")


class DiskFull(Unavailable):
    """A write failed for want of disk space or on a failing device (ENOSPC, EDQUOT, EIO): a
    degraded state the job waits out, not a crash."""

    code = "disk_full"
    http_status = 507


# The errnos of a write that failed for want of space or on a failing device, and how they read once
# they crossed a process boundary as text (a shard's save error on the wire, a role's log).
DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO})
DISK_FULL_TEXT = tuple(f"[Errno {n}]" for n in sorted(DISK_FULL_ERRNOS)) + tuple(
    os.strerror(n) for n in sorted(DISK_FULL_ERRNOS))


class Unauthorized(StreamrecError):
    """Credentials are missing."""

    code = "unauthorized"
    http_status = 401


class Forbidden(StreamrecError):
    """Credentials are present but wrong."""

    code = "forbidden"
    http_status = 403


ERRORS_BY_CODE: dict[str, type[StreamrecError]] = {
    cls.code: cls
    for cls in (
        StreamrecError,
        ConfigError,
        InvalidInput,
        NonFiniteGradient,
        RequestTimeout,
        NotFound,
        CorruptData,
        Conflict,
        Unavailable,
        ShardRestarted,
        DiskFull,
        Unauthorized,
        Forbidden,
    )
}


def error_from_code(code: str, message: str, detail: dict[str, Any] | None = None) -> StreamrecError:
    """Rebuild an error received over the wire (unknown codes become the base class)."""
    return ERRORS_BY_CODE.get(code, StreamrecError)(message, detail=detail)
