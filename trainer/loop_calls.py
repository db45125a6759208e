"""Control operations run on the training thread, between two steps.

The job-control server answers on its own thread, but the model, the PS client and the
consumer belong to the training thread: an operation is posted here (``call``, which blocks
until it ran) and the training loop runs what is posted (``serve``) before its next step.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from core.errors import Unavailable

CALL_TIMEOUT_S = 600.0


class LoopOp(StrEnum):
    CHECKPOINT = "checkpoint"  # end the pass now and wait until it is committed
    EXPORT = "export"  # a bundle of the newest committed pass
    SHRINK = "shrink"  # the eviction policy, now
    ROLLBACK = "rollback"  # back to a committed pass (pass_id=...)


@dataclass
class _Posted:
    op: LoopOp
    args: dict[str, Any]
    done: threading.Event = field(default_factory=threading.Event)
    result: Any = None
    error: Exception | None = None


class LoopCalls:
    """The mailbox between the control thread and the training loop; ``handlers`` runs each op."""

    def __init__(self, handlers: dict[LoopOp, Callable[..., Any]]) -> None:
        missing = set(LoopOp) - set(handlers)
        if missing:
            raise ValueError(f"no handler for {sorted(missing)}")
        self.handlers = handlers
        self._posted: list[_Posted] = []

    def call(self, op: LoopOp, **args: Any) -> Any:
        """Run ``op`` on the training thread between steps (thread-safe); its error is raised here."""
        posted = _Posted(LoopOp(op), args)
        self._posted.append(posted)
        if not posted.done.wait(timeout=CALL_TIMEOUT_S):
            raise Unavailable(f"training loop did not run {posted.op.value!r} within {CALL_TIMEOUT_S:g} s")
        if posted.error is not None:
            raise posted.error
        return posted.result

    def serve(self) -> None:
        """On the training thread: run every posted op, in order."""
        while self._posted:
            posted = self._posted.pop(0)
            try:
                posted.result = self.handlers[posted.op](**posted.args)
            except Exception as exc:  # handed to the control thread, which answers with it
                posted.error = exc
            posted.done.set()
