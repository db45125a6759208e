"""What every shard handler shares: the checks on a request's arrays, the ok reply, and the
outbox that answers a client now or later (a barrier's or a save's reply is deferred)."""

from __future__ import annotations

from typing import Any

import numpy as np
import zmq

from core.errors import InvalidInput, StreamrecError
from ps import protocol
from ps.protocol import Message


def ok(msg: Message, *arrays: np.ndarray, meta: dict[str, Any] | None = None) -> Message:
    """The success reply to ``msg``."""
    return Message(msg.op, msg.request_id, msg.table, arrays=list(arrays), meta=meta or {})


def arrays_of(msg: Message, *counts: int) -> list[np.ndarray]:
    """``msg``'s arrays, when it carries one of ``counts`` of them."""
    if len(msg.arrays) not in counts:
        wanted = " or ".join(map(str, counts))
        raise InvalidInput(f"{msg.op.name.lower()} takes {wanted} arrays, got {len(msg.arrays)}")
    return msg.arrays


class Outbox:
    """Replies through the shard's ROUTER socket, addressed by client identity (loop thread only)."""

    def __init__(self, sock: zmq.Socket) -> None:
        self._sock = sock

    def reply(self, ident: bytes, msg: Message) -> None:
        frames = protocol.encode(msg)
        # zero-copy pays off only for big frames; small replies are cheaper copied
        self._sock.send_multipart([ident, *frames], copy=len(frames) == 1)

    def send(self, ident: bytes, frames: list[Any], *, copy: bool = True) -> None:
        """Frames already encoded (a save's outcome, kept for every client that asks)."""
        self._sock.send_multipart([ident, *frames], copy=copy)

    def error(self, ident: bytes, op: int, request_id: int, err: StreamrecError) -> None:
        self._sock.send_multipart([ident, *protocol.error_reply(op, request_id, err)])
