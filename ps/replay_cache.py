"""The shard's memory of recent mutating requests, so a resent push is applied once.

A client resends a request (RETRY flag) when its reply is late; the shard may have applied
it already. Request ids never repeat per client identity, so ``(identity, request id)`` of
the last mutating requests names each one; a resend may even overtake its original when the
client rebuilt its socket, which is why every request id is checked, not only RETRY ones.
"""

from __future__ import annotations

from collections import OrderedDict

from ps.protocol import Message, Op

MUTATING = frozenset({Op.PUSH_SPARSE, Op.PUSH_DENSE, Op.INIT_DENSE, Op.SHRINK, Op.END_PASS, Op.LOAD,
                      Op.ID_ROWS_WRITE, Op.RATES})
REPLAY_CACHE_SIZE = 4096  # far more than a client keeps in flight


class ReplayCache:
    def __init__(self, size: int = REPLAY_CACHE_SIZE) -> None:
        self._size = size
        self._applied: OrderedDict[tuple[bytes, int], None] = OrderedDict()

    def applied(self, ident: bytes, msg: Message) -> bool:
        """True when ``msg`` mutates and was applied already (answer it without applying)."""
        return msg.op in MUTATING and (ident, msg.request_id) in self._applied

    def remember(self, ident: bytes, msg: Message) -> None:
        if msg.op not in MUTATING:
            return
        self._applied[(ident, msg.request_id)] = None
        if len(self._applied) > self._size:
            self._applied.popitem(last=False)
