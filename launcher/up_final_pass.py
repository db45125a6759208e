"""The final pass of `streamrec up` (``up.commit_on_exit``): before the trainers stop, what they
trained since the last committed pass is committed, so a resumed run loses nothing.

With one worker the chief commits on demand (the control call ``checkpoint``). With several,
passes end together on their own clock (``passes.seconds``), so the job refuses (Conflict) and
`up` waits, up to ``up.stop_timeout_s``, for the pass in progress to be committed. An idle job
commits no pass (trainer.passes): two idle looks of the chief's clock (its status heartbeat)
without a pass mean nothing was trained since the last one, and the final pass is skipped.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from core.errors import Conflict, StreamrecError

_STATUS_POLL_S = 0.2


def commit_final_pass(control_endpoint: str, *, timeout_s: float, say: Callable[[str], None],
                      secret: bytes | None = None) -> None:
    """Commit (or wait for) one more pass through the chief at ``control_endpoint`` (requests
    signed with the run's ``secret``); says how it went."""
    from jobcontrol.channel import ControlClient

    client = ControlClient(control_endpoint, timeout_s=timeout_s, secret=secret)
    try:
        try:
            result = client.call("checkpoint")
            say(f"final pass committed: pass {result.get('pass', result.get('pass_id'))}")
            return
        except Conflict:
            pass  # several workers: passes end together, on their clock
        status = client.call("status")
        before, looks = status.get("pass", 0), _idle_looks(status)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            status = client.call("status")
            now = status.get("pass", 0)
            if now > before:
                say(f"final pass committed: pass {now}")
                return
            if looks is not None and (_idle_looks(status) or 0) >= looks + 2:
                say(f"final pass skipped: nothing trained since pass {now}")
                return
            time.sleep(_STATUS_POLL_S)
        say(f"final pass not committed within {timeout_s:g} s (up.stop_timeout_s)")
    except StreamrecError as err:
        say(f"final pass not committed: {err.message}")
    finally:
        client.close()


def _idle_looks(status: dict) -> int | None:
    """How often the chief's pass clock found no record in its pass (None: a job without the heartbeat)."""
    looks = (status.get("heartbeat") or {}).get("idle_checks")
    return looks if isinstance(looks, int) else None
