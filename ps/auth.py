"""Request authentication: an HMAC-SHA256 of every request with a shared secret.

A shard listening anywhere but loopback must authenticate (see :func:`require_auth_for`).
The client sets the AUTH flag and appends one frame: ``timestamp_ns (u64 LE) || HMAC(secret, timestamp ||
every preceding frame, each prefixed by its length)``. The shard refuses a missing tag
(:class:`Unauthorized`), a wrong one, one older than ``max_skew_s``, or a replay of a tag it
already accepted (:class:`Forbidden`). Length prefixes stop frames from being re-split.
Replies are not signed: the secret protects the tables from writers, not answers in transit.
"""

from __future__ import annotations

import hashlib
import hmac
import struct
import time
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from core.errors import ConfigError, Forbidden, Unauthorized

_TS = struct.Struct("<Q")
_LEN = struct.Struct("<Q")
TAG_SIZE = _TS.size + hashlib.sha256().digest_size
MIN_SECRET_BYTES = 16
_LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")


def _buffer(frame: Any) -> memoryview:
    return frame.buffer if hasattr(frame, "buffer") else memoryview(frame)


def _mac(secret: bytes, ts: bytes, frames: Sequence[Any]) -> bytes:
    h = hmac.new(secret, ts, hashlib.sha256)
    for frame in frames:
        buf = _buffer(frame)
        h.update(_LEN.pack(buf.nbytes))
        h.update(buf)
    return h.digest()


def check_secret(secret: bytes) -> bytes:
    if len(secret) < MIN_SECRET_BYTES:
        raise ConfigError(f"the PS shared secret must be at least {MIN_SECRET_BYTES} bytes, got {len(secret)}")
    return secret


def read_secret(path: str | Path) -> bytes:
    """The shared secret stored in ``path`` (surrounding whitespace ignored)."""
    try:
        return check_secret(Path(path).read_bytes().strip())
    except OSError as exc:
        raise ConfigError(f"cannot read PS secret file {path}: {exc.strerror}") from None


def sign(secret: bytes, frames: Sequence[Any], *, now_ns: int | None = None) -> bytes:
    """The auth frame for ``frames`` (all frames before the auth frame)."""
    ts = _TS.pack(time.time_ns() if now_ns is None else now_ns)
    return ts + _mac(secret, ts, frames)


class Verifier:
    """Checks auth frames on the shard; remembers accepted tags to refuse replays."""

    def __init__(self, secret: bytes, *, max_skew_s: float = 300.0, replay_window: int = 1 << 16) -> None:
        self._secret = check_secret(secret)
        self._max_skew_ns = int(max_skew_s * 1e9)
        self._seen: OrderedDict[bytes, None] = OrderedDict()
        self._window = replay_window

    def verify(self, frames: Sequence[Any], *, has_tag: bool) -> None:
        """``frames`` is the whole message, auth frame last when ``has_tag``. Raises on any failure."""
        if not has_tag or len(frames) < 2:
            raise Unauthorized("this shard requires authenticated requests (HMAC auth frame missing)")
        tag = bytes(_buffer(frames[-1]))
        if len(tag) != TAG_SIZE:
            raise Forbidden(f"malformed auth frame: {len(tag)} bytes, expected {TAG_SIZE}")
        ts = tag[: _TS.size]
        if not hmac.compare_digest(tag[_TS.size :], _mac(self._secret, ts, frames[:-1])):
            raise Forbidden("request signature does not match the shared secret")
        if abs(time.time_ns() - _TS.unpack(ts)[0]) > self._max_skew_ns:
            raise Forbidden("request timestamp is outside the allowed clock skew")
        if tag in self._seen:
            raise Forbidden("replayed request refused")
        self._seen[tag] = None
        if len(self._seen) > self._window:
            self._seen.popitem(last=False)


def is_loopback(endpoint: str) -> bool:
    """True for ``tcp://127.0.0.1:port``-style endpoints, ``ipc://`` and ``inproc://``."""
    if endpoint.startswith(("ipc://", "inproc://")):
        return True
    host = endpoint.removeprefix("tcp://").rsplit(":", 1)[0]
    return host in _LOOPBACK_HOSTS


def require_auth_for(endpoint: str, secret: bytes | None) -> None:
    """Refuse to bind a non-loopback endpoint without a secret."""
    if secret is None and not is_loopback(endpoint):
        raise ConfigError(
            f"refusing to listen on {endpoint} without authentication: set a shared secret "
            "(STREAMREC_PS_SECRET_FILE / --secret-file) or bind to 127.0.0.1"
        )
