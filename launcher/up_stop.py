"""How Ctrl-C and SIGTERM reach `streamrec up`: a request to stop that the running loop waits on.

While `up` starts its roles, the signal raises out of the start (:class:`StopRequested`), so a
user's Ctrl-C is not kept waiting on a broker that is slow to come up. Once `up` watches the
system, the signal only sets a flag that the watch loop looks at between its turns: an
exception raised at an arbitrary bytecode inside a client library can leave that library's
state half-changed, e.g. a ZeroMQ socket created and not yet registered with the PS client
(whose ``close`` then waits forever in the context's ``term``), or a kafka-python lock taken and
never released, and the stop then closes exactly those clients.
"""

from __future__ import annotations

import signal
import time
from types import FrameType

_TURN_S = 0.1  # how often a waiting loop looks at the request


class StopRequested(Exception):
    """Ctrl-C or SIGTERM while `up` was still starting."""


class StopRequest:
    """The signal handler and the flag it sets; ``deferred`` makes the handler only set it.

    A plain attribute, not a ``threading.Event``: the handler runs in the main thread between two
    bytecodes, possibly while that thread holds the event's own lock inside ``wait``, and
    ``Event.set`` would then wait on it forever."""

    def __init__(self) -> None:
        self.asked = False
        self.deferred = False
        self.signal_name = ""

    def handle(self, signum: int, frame: FrameType | None) -> None:
        self.signal_name = signal.Signals(signum).name
        self.asked = True
        if not self.deferred:
            raise StopRequested(self.signal_name)

    def wait(self, timeout_s: float) -> bool:
        """Sleep up to ``timeout_s``, looking at the request every 0.1 s; True once a stop was asked for."""
        deadline = time.monotonic() + timeout_s
        while not self.asked:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(_TURN_S, left))
        return True
