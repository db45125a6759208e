"""A small pull's reply frame, preallocated once per table and reused by every small pull.

The ok reply to a pull of ``n`` keys that fits inline is one frame laid out exactly as
:func:`ps.protocol.encode` lays it out: the fixed header, the table name, one float32
``(n, width)`` descriptor, then the rows. Only the request id and ``n`` change from one
reply to the next, so each table keeps one buffer of the largest inline reply; a pull
packs those two fields into it, gathers its rows straight into a view of it, and sends
its first bytes. ZeroMQ copies a frame sent with ``copy=True`` before ``send`` returns,
so the buffer is free again for the next request (the loop thread is its only user).
"""

from __future__ import annotations

import struct

import numpy as np

from ps.protocol import HEADER, INLINE_MAX_BYTES, MAGIC, STATUS_OK, VERSION, Op

_F32 = np.dtype(np.float32)
_F32_INLINE_CODE = 2 | 0x80  # protocol's float32 code with its inline bit
_RID_AT = 16  # the request id's offset in HEADER ("<4sBBHBBHIQQ")
_U64 = struct.Struct("<Q")
_DESC = struct.Struct("<BBQQ")  # code, ndim, n, width: encode's 2-d descriptor


class PullReplyFrames:
    """Reply frames of one table's small pulls (rows of ``width`` float32), stamped with ``incarnation``."""

    def __init__(self, table: str, width: int, incarnation: int) -> None:
        name = table.encode()
        head = HEADER.pack(MAGIC, VERSION, Op.PULL_SPARSE, 0, STATUS_OK, 1, len(name), 0, 0, incarnation) + name
        self._n_at = len(head) + 2  # n, after the descriptor's code and ndim bytes
        desc = _DESC.pack(_F32_INLINE_CODE, 2, 0, width)
        self._rows_at = len(head) + len(desc)
        self.max_rows = INLINE_MAX_BYTES // (4 * width)
        self._buf = bytearray(self._rows_at + self.max_rows * width * 4)
        self._buf[: self._rows_at] = head + desc
        self.width, self.incarnation = width, incarnation
        self._views: dict[int, tuple[np.ndarray, memoryview]] = {}  # n -> (rows view, frame), made once each

    def frame(self, request_id: int, n: int) -> tuple[memoryview, np.ndarray]:
        """The reply frame to request ``request_id`` of ``n <= max_rows`` keys and a writable view
        of its rows: fill the view, then send the frame before the next call."""
        views = self._views.get(n)
        if views is None:
            rows = np.ndarray((n, self.width), _F32, self._buf, self._rows_at)
            views = self._views[n] = (rows, memoryview(self._buf)[: self._rows_at + rows.nbytes])
        buf = self._buf
        _U64.pack_into(buf, _RID_AT, request_id)
        _U64.pack_into(buf, self._n_at, n)
        return views[1], views[0]
