"""The parameter-server wire protocol: one multipart ZeroMQ message per request or reply.

Frames (no pickle anywhere)::

    [header, array_0, ..., array_{n-1}]            or, with the AUTH flag set,
    [header, array_0, ..., array_{n-1}, auth]

- ``header``: fixed little-endian struct ``HEADER``, then the table name (UTF-8), then per
  array a dtype code (u8), ndim (u8) and ``ndim`` u64 dims, then ``meta_len`` bytes of meta:
  a UTF-8 JSON object of small options (save path, step, worker count, an error's
  ``code``/``message``), or nothing.
- ``array_i``: the raw C-order bytes of array ``i``; sent zero-copy, received with
  ``np.frombuffer`` (no copy either). Arrays of at most ``INLINE_MAX_BYTES`` instead follow
  the meta inside the header frame (their dtype code has bit 0x80 set), in array order.
- ``auth``: the MAC tag of :mod:`ps.auth` over all the frames before it.

Every frame costs a few microseconds each way, so small options travel inside the header.

A reply echoes ``op`` and ``request_id``; ``status`` is ``STATUS_ERROR`` when the request
failed, and its meta then carries the :mod:`core.errors` ``code`` and ``message``. Every reply
carries the shard's ``incarnation`` (random, non-zero, new at every process start): a client
that sees it change knows the shard restarted (its tables came back from a save, or empty).
Requests carry 0.
Bumping ``VERSION`` is required for any layout change; a peer speaking another version gets
an error reply naming both versions.
"""

from __future__ import annotations

import enum
import json
import math
import struct
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from core.errors import InvalidInput, StreamrecError

MAGIC = b"SRPS"
VERSION = 2  # 2: the incarnation field
# magic, version, op, flags, status, n_arrays, name_len, meta_len, request_id, incarnation
HEADER = struct.Struct("<4sBBHBBHIQQ")
_DIM = struct.Struct("<Q")
MAX_ARRAYS = 8
MAX_NDIM = 4
INLINE_MAX_BYTES = 16384  # smaller arrays travel inside the header frame: one frame less each way
_INLINE = 0x80  # dtype-code bit: this array's bytes follow the meta in the header frame


class Op(enum.IntEnum):
    UNKNOWN = 0  # only in error replies to requests too broken to name their op
    PULL_SPARSE = 1
    PUSH_SPARSE = 2
    PULL_DENSE = 3
    PUSH_DENSE = 4
    INIT_DENSE = 5
    BARRIER = 6
    SAVE = 7
    LOAD = 8
    SHRINK = 9
    STATS = 10
    HEALTH = 11
    STOP = 12
    END_PASS = 13
    POLICY = 14  # meta {table, admission?, eviction?, dry_run}: read, dry-run or change a table's policy
    SAVE_WAIT = 15  # meta {save?}: reply when that save (or, without one, any running save) is written
    CHANGES = 16  # meta {generation, since, limit}: a table's changed keys after a cursor (ps.shard_changes)
    ID_ROWS_WRITE = 17  # meta {mode: append|put, words, ttl_passes?}: id-rows tables (ps.shard_id_rows)
    ID_ROWS_READ = 18  # meta {words}: stored id rows and a found mask (ps.shard_id_rows)
    RATES = 19  # meta {alpha}: count a step's keys in a rate table, reply the asked keys' rates (ps.shard_id_rows)
    # worker-rank leases (ps.rank_leases), kept on shard 0; numbered apart from the data ops
    LEASE = 40  # meta {action: claim|renew|release|list, holder, workers, ttl_s, rank}


class Flag(enum.IntFlag):
    NONE = 0
    SYNC = 1  # push: accumulate until the step's barrier, then apply the sum once
    GEO_DELTA = 2  # push: the arrays are deltas to add to the rows (geo mode)
    RETRY = 4  # a resend of an earlier request id (informational: shards dedupe every mutating request id)
    AUTH = 8  # the last frame is an auth tag
    EXISTING = 16  # pull: only stored rows (absent ids read as zeros); the reply adds a uint8 found mask
    DETACH = 32  # save: reply once the consistent point is taken; the shard writes on (SAVE_WAIT collects it)
    UNIQUE = 64  # push: the sender's keys have no repeats (no dedupe pass; a repeat is still handled safely)


_OPS = {int(op): op for op in Op}
_FLAG_BITS = 0x7F
_FLAGS = tuple(Flag(i) for i in range(_FLAG_BITS + 1))  # enum construction per message is measurably slow

STATUS_OK = 0
STATUS_ERROR = 1

_DTYPES: dict[int, np.dtype] = {
    1: np.dtype(np.uint64),
    2: np.dtype(np.float32),
    3: np.dtype(np.int64),
    4: np.dtype(np.float64),
    5: np.dtype(np.int32),
    6: np.dtype(np.uint8),
}
_CODES: dict[np.dtype, int] = {dt: code for code, dt in _DTYPES.items()}


@dataclass(slots=True)  # slots: built and read on every request, twice per round trip
class Message:
    """A decoded request or reply."""

    op: Op
    request_id: int
    table: str = ""
    arrays: list[np.ndarray] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)
    flags: Flag = Flag.NONE
    status: int = STATUS_OK
    incarnation: int = 0  # the replying shard's (0 in requests)


_DESCS = tuple(struct.Struct("<BB" + "Q" * k) for k in range(MAX_NDIM + 1))  # code, ndim, dims
_SHAPES = tuple(struct.Struct("<" + "Q" * k) for k in range(MAX_NDIM + 1))
# Flags as plain ints on the hot path: IntFlag's | & ~ run as Python code and cost microseconds each.
_AUTH_BIT = int(Flag.AUTH)
_dump_meta = json.JSONEncoder(separators=(",", ":")).encode
_HEAD_SIZE = HEADER.size
_PREFIX = MAGIC + bytes([VERSION])  # what a header of this version starts with
# (code byte << 8 | ndim byte) -> (dtype, shape struct, descriptor size, inline?), one lookup per array
_LAYOUTS = {(code | inline) << 8 | ndim: (dt, _SHAPES[ndim], 2 + 8 * ndim, bool(inline))
            for code, dt in _DTYPES.items() for inline in (0, _INLINE) for ndim in range(MAX_NDIM + 1)}


def encode(msg: Message, *, auth: bool = False) -> list[Any]:
    """Frames of ``msg`` (without the auth frame, which the caller appends when ``auth``);
    arrays are passed as memoryviews."""
    arrays = msg.arrays
    flags = int(msg.flags) | _AUTH_BIT if auth else int(msg.flags) & ~_AUTH_BIT
    if len(arrays) == 1 and not msg.meta:  # the common small message (a pull, its reply): one join
        arr = arrays[0]
        code, shape = _CODES.get(arr.dtype), arr.shape
        if code is not None and len(shape) <= MAX_NDIM and arr.nbytes <= INLINE_MAX_BYTES:
            name = msg.table.encode()
            return [b"".join((HEADER.pack(MAGIC, VERSION, msg.op, flags, msg.status, 1, len(name), 0, msg.request_id,
                                          msg.incarnation), name,
                              _DESCS[len(shape)].pack(code | _INLINE, len(shape), *shape), arr.tobytes()))]
    if len(arrays) > MAX_ARRAYS:
        raise InvalidInput(f"at most {MAX_ARRAYS} arrays per message, got {len(arrays)}")
    name = msg.table.encode()
    meta = _dump_meta(msg.meta).encode() if msg.meta else b""
    parts: list[Any] = [b"", name]  # the fixed header goes first, packed once the sizes are known
    frames: list[Any] = []
    inline: list[bytes] = []
    for arr in arrays:
        code = _CODES.get(arr.dtype)
        if code is None:
            raise InvalidInput(f"dtype {arr.dtype} cannot be sent; use one of {sorted(str(d) for d in _CODES)}")
        shape = arr.shape
        if len(shape) > MAX_NDIM:
            raise InvalidInput(f"arrays have at most {MAX_NDIM} dims, got {len(shape)}")
        if arr.nbytes <= INLINE_MAX_BYTES:
            code |= _INLINE
            inline.append(arr.tobytes())  # C order whatever the strides
        else:
            frames.append(memoryview(np.ascontiguousarray(arr)).cast("B"))
        parts.append(_DESCS[len(shape)].pack(code, len(shape), *shape))
    parts[0] = HEADER.pack(MAGIC, VERSION, msg.op, flags, msg.status, len(arrays), len(name), len(meta),
                           msg.request_id, msg.incarnation)
    parts.append(meta)
    parts += inline
    return [b"".join(parts), *frames]


def _frame_bytes(frame: Any) -> Any:
    """A buffer of ``frame`` (bytes as they are, a ``zmq.Frame``'s memoryview, no copy)."""
    if type(frame) is bytes:
        return frame
    return frame.buffer if hasattr(frame, "buffer") else memoryview(frame)


def decode(frames: list[Any]) -> Message:
    """Parse frames (bytes or ``zmq.Frame``), including the auth frame when flagged.

    Raises :class:`InvalidInput` naming what is wrong: bad magic, another protocol version,
    an unknown op or dtype, truncated header or arrays, malformed meta.
    """
    if not frames:
        raise InvalidInput("empty message")
    head = frames[0]
    if type(head) is not bytes:
        head = _frame_bytes(head)
    size = len(head)
    if size < _HEAD_SIZE:
        raise InvalidInput(f"truncated header: {size} bytes, need at least {_HEAD_SIZE}")
    magic, version, op, flags, status, n_arrays, name_len, meta_len, request_id, incarnation = \
        HEADER.unpack_from(head, 0)
    if head[:5] != _PREFIX:  # magic and version in one comparison
        if magic != MAGIC:
            raise InvalidInput(f"bad magic {bytes(magic)!r}, expected {MAGIC!r}")
        raise InvalidInput(f"protocol version {version} is not supported; this peer speaks version {VERSION}")
    op_member = _OPS.get(op)
    if op_member is None or (op == 0 and status != STATUS_ERROR):
        raise InvalidInput(f"unknown op {op}")
    if n_arrays > MAX_ARRAYS:
        raise InvalidInput(f"at most {MAX_ARRAYS} arrays per message, header says {n_arrays}")
    pos = _HEAD_SIZE + name_len
    if size < pos:
        raise InvalidInput("truncated header: table name cut off")
    if n_arrays == 1 and len(frames) == (2 if flags & _AUTH_BIT else 1) and not meta_len and size > pos + 1:
        # the common small message (a pull, signed or not, its reply): one inline array and nothing
        # else, read in one pass; anything else (and every malformed case) takes the general path below
        known = _LAYOUTS.get(head[pos] << 8 | head[pos + 1])
        if known is not None and known[3]:
            dtype, shape_struct, desc_size, _ = known
            at = pos + desc_size
            if size >= at:
                shape = shape_struct.unpack_from(head, pos + 2)
                count = math.prod(shape)
                if size == at + count * dtype.itemsize:
                    try:
                        table = str(head[_HEAD_SIZE:pos], "utf-8") if name_len else ""
                    except UnicodeDecodeError:
                        raise InvalidInput("table name is not valid UTF-8") from None
                    # np.ndarray over the buffer: one call where frombuffer + reshape take two
                    arr = (np.frombuffer(head, dtype, count, at) if len(shape) == 1 else
                           np.ndarray(shape, dtype, head, at))
                    return Message(op_member, request_id, table, [arr], {}, _FLAGS[flags & _FLAG_BITS], status,
                                   incarnation)
    try:
        table = str(head[_HEAD_SIZE:pos], "utf-8") if name_len else ""
    except UnicodeDecodeError:
        raise InvalidInput("table name is not valid UTF-8") from None
    layout = []
    n_frames = 0
    for i in range(n_arrays):
        if size < pos + 2:
            raise InvalidInput(f"truncated header: array {i} descriptor cut off")
        code, ndim = head[pos], head[pos + 1]
        known = _LAYOUTS.get(code << 8 | ndim)
        if known is None:
            if code & ~_INLINE not in _DTYPES:
                raise InvalidInput(f"array {i}: unknown dtype code {code & ~_INLINE}")
            raise InvalidInput(f"array {i}: bad or truncated shape (ndim {ndim})")
        dtype, shape_struct, desc_size, is_inline = known
        if size < pos + desc_size:
            raise InvalidInput(f"array {i}: bad or truncated shape (ndim {ndim})")
        shape = shape_struct.unpack_from(head, pos + 2)
        pos += desc_size
        n_frames += not is_inline
        layout.append((dtype, shape, is_inline))
    n_auth = 1 if flags & _AUTH_BIT else 0
    if len(frames) != 1 + n_frames + n_auth:
        raise InvalidInput(
            f"header announces {n_frames} array frames{' and auth' if n_auth else ''} but the message has "
            f"{len(frames) - 1} frames after it"
        )
    meta_end = pos + meta_len
    if meta_end > size:
        raise InvalidInput(f"truncated header: {size} bytes, its fields and meta make {meta_end}")
    inline_at, frame_at = meta_end, 1
    arrays = []
    for i, (dtype, shape, is_inline) in enumerate(layout):
        count = math.prod(shape)
        nbytes = count * dtype.itemsize
        if is_inline:
            buf, offset = head, inline_at
            got = min(nbytes, size - inline_at)
            inline_at += nbytes
        else:
            buf, offset = _frame_bytes(frames[frame_at]), 0
            got = len(buf) if type(buf) is bytes else buf.nbytes
            frame_at += 1
        if got != nbytes:
            raise InvalidInput(f"array {i}: shape {shape} of {dtype} needs {nbytes} bytes, got {got}")
        arrays.append(np.frombuffer(buf, dtype, count, offset) if len(shape) == 1 else
                      np.ndarray(shape, dtype, buf, offset))
    if inline_at != size:
        raise InvalidInput(f"header is {size} bytes, its fields, meta and inline arrays make {inline_at}")
    meta: dict[str, Any] = {}
    if meta_len:
        try:
            meta = json.loads(bytes(head[pos:meta_end]))
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise InvalidInput("meta frame is not valid JSON") from None
        if not isinstance(meta, dict):
            raise InvalidInput("meta frame must be a JSON object")
    return Message(op_member, request_id, table, arrays, meta, _FLAGS[flags & _FLAG_BITS], status, incarnation)


def check_keys(keys: Any) -> np.ndarray:
    """``keys`` as the wire carries them (a 1-d uint64 array), or InvalidInput; never converted."""
    keys = np.asarray(keys)
    if keys.dtype != np.uint64 or keys.ndim != 1:
        raise InvalidInput(f"keys must be a 1-d uint64 array, got {keys.ndim}-d {keys.dtype}")
    return keys


def peek(frames: list[Any]) -> tuple[int, Flag, int]:
    """(op, flags, request_id) of a message whose fixed header is complete, else (0, NONE, 0).

    Lets the shard check auth before decoding and address an error reply to a request it
    could not decode.
    """
    if frames:
        head = _frame_bytes(frames[0])
        if len(head) >= HEADER.size:
            _, _, op, flags, _, _, _, _, request_id, _ = HEADER.unpack_from(head, 0)
            return op, _FLAGS[flags & _FLAG_BITS], request_id
    return 0, Flag.NONE, 0


def error_reply(op: int, request_id: int, err: StreamrecError, *, incarnation: int = 0) -> list[Any]:
    """Frames of an error reply carrying the error's code, message and detail."""
    op = op if op in Op._value2member_map_ else Op.UNKNOWN
    meta = json.dumps({"code": err.code, "message": err.message, "detail": err.detail}, default=str).encode()
    return [HEADER.pack(MAGIC, VERSION, op, 0, STATUS_ERROR, 0, 0, len(meta), request_id, incarnation) + meta]
