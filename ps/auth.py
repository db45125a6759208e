"""Request authentication: an HMAC-SHA256 of every request with a shared secret.

A shard listening anywhere but loopback must authenticate (see :func:`require_auth_for`).
The client sets the AUTH flag and appends one frame: ``timestamp_ns (u64 LE) || HMAC(secret,
timestamp || identity || every preceding frame, each prefixed by its length)``, where
``identity`` is the client's ZeroMQ identity, which the shard's ROUTER socket sees: a
captured request replayed from another connection does not verify. Length prefixes stop
frames from being re-split.

The shard (:class:`Verifier`) refuses a missing tag (:class:`Unauthorized`), a wrong one, a
timestamp more than ``max_skew_s`` away from its clock, a timestamp from before the shard
process started, and a replay of a tag it already accepted (:class:`Forbidden`).

- The replay memory covers exactly the accepted time window: every tag younger than
  ``max_skew_s`` is remembered (in one-second buckets of its timestamp, dropped whole once
  older than the window), so no replay inside the window is ever forgotten. It holds at most
  ``capacity`` tags: when full, requests are refused (:class:`Unavailable`) until the oldest
  expire, rather than forgetting any.
- A restarted shard has forgotten what it accepted, so what was signed before it started is
  refused, with ``detail.resign``: a client's own request queued while the shard was down is
  sent again at once, signed afresh, by :mod:`ps.transport`.
- A legitimate resend (the RETRY flag) is signed afresh, so it carries a new tag; the
  shard's replay cache (:mod:`ps.replay_cache`) then applies it at most once.

Replies are not signed: the secret protects the tables from writers, not answers in transit.
"""

from __future__ import annotations

import functools
import hashlib
import heapq
import hmac
import struct
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from core.errors import ConfigError, Forbidden, Unauthorized, Unavailable

_TS = struct.Struct("<Q")
_LEN = struct.Struct("<Q")
TAG_SIZE = _TS.size + hashlib.sha256().digest_size
MIN_SECRET_BYTES = 16
_LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")
_KEPT_MAC_BYTES = 16  # of the 32: a forged match is still 2^-128; the timestamp picks the bucket
_SECOND_NS = 1_000_000_000


def _buffer(frame: Any) -> memoryview:
    return frame.buffer if hasattr(frame, "buffer") else memoryview(frame)


_JOIN_MAX = 1 << 16  # messages up to this size are MACed as one joined buffer (one update call)


_BLOCK = hashlib.sha256().block_size


@functools.lru_cache(maxsize=16)
def _pads(secret: bytes) -> tuple[Any, Any]:
    """HMAC-SHA256's inner and outer hashes with the key already absorbed (RFC 2104): a C-level
    copy of each per message skips the key set-up and the Python of ``hmac.HMAC.copy``, which
    cost more than hashing a small request. Same bytes as ``hmac.digest(secret, msg, "sha256")``."""
    key = hashlib.sha256(secret).digest() if len(secret) > _BLOCK else secret
    key = key.ljust(_BLOCK, b"\0")
    return hashlib.sha256(bytes(b ^ 0x36 for b in key)), hashlib.sha256(bytes(b ^ 0x5C for b in key))


def _mac(pads: tuple[Any, Any], ts: bytes, identity: bytes, frames: Sequence[Any]) -> bytes:
    """HMAC-SHA256 of the documented bytes under the key whose inner and outer hashes are ``pads``."""
    pad_in, pad_out = pads
    h = pad_in.copy()
    if len(frames) == 1 and type(frames[0]) is bytes and len(frames[0]) <= _JOIN_MAX:
        # a small request is one header frame (its arrays inline): hashed in one update
        frame = frames[0]
        h.update(b"".join((ts, _LEN.pack(len(identity)), identity, _LEN.pack(len(frame)), frame)))
    else:
        bufs = [_buffer(frame) for frame in frames]
        parts = [ts, _LEN.pack(len(identity)), identity]
        if sum(b.nbytes for b in bufs) <= _JOIN_MAX:
            for buf in bufs:
                parts += (_LEN.pack(buf.nbytes), buf)
            h.update(b"".join(parts))
        else:
            h.update(b"".join(parts))
            for buf in bufs:  # big pushes: the arrays are hashed where they lie, not copied
                h.update(_LEN.pack(buf.nbytes))
                h.update(buf)
    outer = pad_out.copy()
    outer.update(h.digest())
    return outer.digest()


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


def sign(secret: bytes, frames: Sequence[Any], *, identity: bytes, now_ns: int | None = None) -> bytes:
    """The auth frame for ``frames`` (all frames before the auth frame), sent by the client
    whose ZeroMQ identity is ``identity``."""
    ts = _TS.pack(time.time_ns() if now_ns is None else now_ns)
    return ts + _mac(_pads(secret), ts, identity, frames)


class Verifier:
    """Checks auth frames on the shard; remembers every tag of the accepted window to refuse replays.

    Timestamps before the verifier was made (the shard's start) are refused; ``clock`` gives
    the time in ns.
    """

    def __init__(self, secret: bytes, *, max_skew_s: float = 60.0, capacity: int = 1 << 20,
                 clock: Callable[[], int] = time.time_ns) -> None:
        self._pads = _pads(check_secret(secret))
        self._max_skew_ns = int(max_skew_s * 1e9)
        self._clock = clock
        self._not_before_ns = clock()
        self._capacity = capacity
        self._buckets: dict[int, set[bytes]] = {}  # second of the timestamp -> MACs accepted with it
        self._seconds: list[int] = []  # heap of the buckets' seconds, oldest first
        self.remembered = 0

    def verify(self, frames: Sequence[Any], *, has_tag: bool, identity: bytes) -> None:
        """``frames`` is the whole message, auth frame last when ``has_tag``, from the client
        ``identity``. Raises on any failure; on success the tag is remembered."""
        if not has_tag or len(frames) < 2:
            raise Unauthorized("this shard requires authenticated requests (HMAC auth frame missing)")
        last = frames[-1]
        tag = last if type(last) is bytes else bytes(_buffer(last))
        if len(tag) != TAG_SIZE:
            raise Forbidden(f"malformed auth frame: {len(tag)} bytes, expected {TAG_SIZE}")
        ts = tag[: _TS.size]
        if not hmac.compare_digest(tag[_TS.size :], _mac(self._pads, ts, identity, frames[:-1])):
            raise Forbidden("request signature does not match the shared secret and this connection")
        ts_ns, now = _TS.unpack(ts)[0], self._clock()
        if abs(now - ts_ns) > self._max_skew_ns:
            raise Forbidden(f"request timestamp is {(now - ts_ns) / 1e9:+.1f} s off this shard's clock "
                            f"(at most {self._max_skew_ns / 1e9:g} s allowed)")
        if ts_ns < self._not_before_ns:
            raise Forbidden(f"request signed {(self._not_before_ns - ts_ns) / 1e9:.3f} s before this shard started "
                            "(a replay to a restarted shard, or the client's clock is behind)",
                            detail={"resign": True})  # the client that signed it sends it again, signed now
        if self._seconds and self._seconds[0] < (now - self._max_skew_ns) // _SECOND_NS:
            self._expire(now)  # the oldest bucket left the window (the test is _expire's own, inline)
        second, mac = ts_ns // _SECOND_NS, tag[_TS.size : _TS.size + _KEPT_MAC_BYTES]
        bucket = self._buckets.get(second)
        if bucket is not None and mac in bucket:
            raise Forbidden("replayed request refused")
        if self.remembered >= self._capacity:
            raise Unavailable(f"replay memory full: {self.remembered} requests accepted in the last "
                              f"{self._max_skew_ns / 1e9:g} s; refusing until the oldest expire "
                              "(raise auth.replay_capacity or lower auth.max_skew_s)")
        if bucket is None:
            bucket = self._buckets[second] = set()
            heapq.heappush(self._seconds, second)
        bucket.add(mac)
        self.remembered += 1

    def _expire(self, now_ns: int) -> None:
        """Drop the buckets whose every timestamp is older than the window (none can verify again)."""
        horizon = (now_ns - self._max_skew_ns) // _SECOND_NS  # bucket s holds [s, s+1) seconds
        while self._seconds and self._seconds[0] < horizon:
            self.remembered -= len(self._buckets.pop(heapq.heappop(self._seconds)))


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
