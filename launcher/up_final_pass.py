"""The final pass of `streamrec up` (``up.commit_on_exit``): before the trainers stop, what they
trained since the last committed pass is committed, so a resumed run loses nothing.

With one worker the chief commits on demand (the control call ``checkpoint``). With several,
passes end together on their own clock (``passes.seconds``), so the job refuses (Conflict) and
`up` waits, up to ``up.stop_timeout_s``, for the pass in progress to end. An idle job commits
no pass (trainer.passes): two idle looks of the chief's clock (its status heartbeat) without a
pass mean nothing was trained since the last one, and the final pass is skipped.

A pass that ended is not yet committed: the workers are released at the commit barrier and the
chief's finisher writes the shards' saves and then ``pass.json`` (trainer.pass_commit), which
takes a while for large tables. So :meth:`FinalPass.commit` waits, within the same timeout, for
that manifest, the trainers then stop on SIGTERM with time to finish (launcher.launch), and only
:meth:`FinalPass.report`, once they stopped, says "committed": when the pass's manifest is there
and verifies, as a restore would read it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from core.errors import Conflict, StreamrecError, Unavailable

if TYPE_CHECKING:
    from jobcontrol.channel import ControlClient

_STATUS_POLL_S = 0.2
_STATUS_CALL_S = 5.0  # one status look's wait for the chief's answer


class FinalPass:
    """The final pass through the chief at ``control_endpoint`` (requests signed with the run's
    ``secret``), committed into the checkpoint root ``root`` (a path or a URL)."""

    def __init__(self, control_endpoint: str, *, root: str, timeout_s: float, say: Callable[[str], None],
                 secret: bytes | None = None) -> None:
        self.control_endpoint = control_endpoint
        self.root = root
        self.timeout_s = timeout_s
        self.say = say
        self.secret = secret
        self.pass_id: int | None = None  # the pass that ended as the final one, once it did

    def commit(self) -> None:
        """While the trainers run: end one more pass (or wait for the one in progress), then wait
        for its manifest; says how it went, except "committed" (:meth:`report` does)."""
        from jobcontrol.channel import ControlClient

        deadline = time.monotonic() + self.timeout_s
        client = ControlClient(self.control_endpoint, timeout_s=self.timeout_s, secret=self.secret)
        # the status looks are short, so a chief that stops answering cannot hold the stop past the deadline
        looks = ControlClient(self.control_endpoint, timeout_s=min(_STATUS_CALL_S, self.timeout_s), secret=self.secret)
        try:
            self.pass_id = self._end_pass(client, looks, deadline)
        except StreamrecError as err:
            self.say(f"final pass not committed: {err.message}")
        finally:
            client.close()
            looks.close()
        if self.pass_id is not None:
            self._await_manifest(self.pass_id, deadline)

    def _end_pass(self, client: ControlClient, looks: ControlClient, deadline: float) -> int | None:
        """The id of the pass that ended as the final one; None when it was skipped or not in time."""
        try:
            result = client.call("checkpoint")
            n = result.get("pass", result.get("pass_id"))
            return int(n) if n is not None else None
        except Conflict:
            pass  # several workers: passes end together, on their clock
        first: dict | None = None
        while time.monotonic() < deadline:
            try:
                status = looks.call("status")
            except Unavailable:
                continue  # a chief too busy to answer in time is asked again, until the deadline
            if first is None:
                first = status
                continue
            before, idle = first.get("pass", 0), _idle_looks(first)
            now = status.get("pass", 0)
            if now > before:
                return int(now)
            if idle is not None and (_idle_looks(status) or 0) >= idle + 2:
                self.say(f"final pass skipped: nothing trained since pass {now}")
                return None
            time.sleep(_STATUS_POLL_S)
        self.say(f"final pass not committed: no pass ended within {self.timeout_s:g} s (up.stop_timeout_s)")
        return None

    def _await_manifest(self, pass_id: int, deadline: float) -> None:
        """Until pass ``pass_id``'s manifest exists (the finisher wrote the saves), or ``deadline``."""
        from stores.store import open_store
        from trainer import checkpoints

        manifest = f"{checkpoints.pass_name(pass_id)}/{checkpoints.MANIFEST}"
        while time.monotonic() < deadline:
            try:
                if open_store(self.root).exists(manifest):
                    return
            except (StreamrecError, OSError):
                pass  # looked at again until the deadline; report() names what is wrong
            time.sleep(_STATUS_POLL_S)
        self.say(f"final pass {pass_id} ended, its save still being written after {self.timeout_s:g} s "
                 f"(up.stop_timeout_s); the trainers get time to finish it")

    def report(self) -> None:
        """Once the trainers stopped: "committed" only when the pass's manifest is there and every
        file it names verifies; else says so, and where the next start resumes."""
        if self.pass_id is None:
            return
        from trainer import checkpoints

        try:
            checkpoints.read_pass(self.root, self.pass_id)
        except Exception as err:  # whatever keeps the manifest from verifying, a malformed one too
            reason = err.message if isinstance(err, StreamrecError) else f"{type(err).__name__}: {err}"
            last = self._last_valid_pass()
            resume = f"the last committed pass, {last}" if last is not None else "the start (no pass is committed)"
            self.say(f"final pass NOT committed: pass {self.pass_id} has no valid {checkpoints.MANIFEST} "
                     f"({reason}); the next start resumes from {resume}")
            return
        self.say(f"final pass committed: pass {self.pass_id}")

    def _last_valid_pass(self) -> int | None:
        """The newest pass other than the final one whose manifest verifies: where a restore begins."""
        from trainer import checkpoints

        try:
            done = checkpoints.complete_passes(self.root)
        except (StreamrecError, OSError):
            return None
        for n in reversed([n for n in done if n != self.pass_id]):
            try:
                checkpoints.read_pass(self.root, n)
                return n
            except Exception:  # the restore sets it aside too
                continue
        return None


def _idle_looks(status: dict) -> int | None:
    """How often the chief's pass clock found no record in its pass (None: a job without the heartbeat)."""
    looks = (status.get("heartbeat") or {}).get("idle_checks")
    return looks if isinstance(looks, int) else None
