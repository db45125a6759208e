"""Restarting dead roles the way Kubernetes does (``restartPolicy: Always`` with CrashLoopBackOff).

A role that exits is started again after a back-off: ``backoff_s`` the first time, doubled for
every restart already made within the last ``window_s``, capped at ``backoff_max_s``. A role
that needs more than ``max_restarts`` restarts within ``window_s`` stays dead and its
supervisor gives up (a crash loop is a bug to look at, not to hide). Roles recover through
their own paths: a shard reloads its last checkpoint, trainers regroup from the last complete
pass, the service re-reads the newest bundle. A role whose last run ended on a full disk (its
log says so: ENOSPC, EDQUOT, EIO) is not in a crash loop but waiting for space: it is started
again every ``backoff_max_s`` (at least :data:`DISK_FULL_RETRY_S`) and never given up on, and
the supervisor says "disk full".

:class:`Supervised` applies a policy to one :class:`launcher.role_process.RoleProcess`; the launcher
and ``streamrec up`` call :meth:`Supervised.tend` every turn of their watch loop.
"""

from __future__ import annotations

import logging
import math
import signal
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

from pydantic import Field

from core.yaml_config import FrozenModel
from launcher.role_process import RoleProcess

log = logging.getLogger(__name__)


class RestartPolicy(FrozenModel):
    """How often a dead role is started again (module docstring)."""

    max_restarts: int = Field(5, ge=0,
                              description="Restarts allowed within `window_s`; one more death and the role stays dead.")
    window_s: float = Field(300.0, gt=0.0, description="Seconds over which a role's recent restarts are counted.")
    backoff_s: float = Field(1.0, ge=0.0,
                             description="Seconds before the first restart, doubled for each recent restart.")
    backoff_max_s: float = Field(30.0, ge=0.0, description="The longest wait before a restart, in seconds.")

    def delay_s(self, recent: int) -> float:
        """The back-off before a restart, ``recent`` restarts having been made within the window."""
        return min(self.backoff_s * 2.0**recent, self.backoff_max_s)


NEVER_EXPIRES = math.inf
DISK_FULL_RETRY_S = 5.0
RENEW_GRACE_S = 10.0  # a role started again for a new configuration: its time to stop on SIGTERM


def restarts_ever(n: int) -> RestartPolicy:
    """At most ``n`` restarts in the role's whole life, each at once (``streamrec launch --max-restart``)."""
    return RestartPolicy(max_restarts=n, window_s=NEVER_EXPIRES, backoff_s=0.0, backoff_max_s=0.0)


class Tended(Enum):
    RUNNING = "running"  # running, or dead and waiting for its restart
    FINISHED = "finished"  # exited 0 and ``finished_ok``: not restarted
    GAVE_UP = "gave_up"  # dead past its restart budget


@dataclass
class Supervised:
    """One role under a :class:`RestartPolicy`; ``finished_ok``: exit 0 means done, not dead."""

    role: RoleProcess
    policy: RestartPolicy
    finished_ok: bool = False
    clock: Callable[[], float] = time.monotonic
    recent: deque[float] = field(default_factory=deque)  # when the restarts within the window were made
    due: float | None = None  # when a dead role starts again
    gave_up: bool = False
    finished: bool = False  # exited 0 under finished_ok (said once)

    def renew(self) -> None:
        """Start the role again now, its configuration having changed: stopped (SIGTERM, then SIGKILL
        after :data:`RENEW_GRACE_S`) if it runs; no crash, so no back-off and nothing counted."""
        if self.gave_up or self.finished or self.role.proc is None:
            return
        if self.due is None and self.role.poll() is None:
            self.role.kill(signal.SIGTERM)
            if self.role.wait(RENEW_GRACE_S) is None:
                self.role.kill()
                self.role.wait(RENEW_GRACE_S)
        self.due = None
        self.role.restarts += 1
        self.role.close_log()
        self.role.start()

    def tend(self, say: Callable[[str], None]) -> Tended:
        """Restart the role when due; notice a death and schedule its restart, or give up."""
        now = self.clock()
        if self.due is not None:
            if now < self.due:
                return Tended.RUNNING
            self.due = None
            self.role.restarts += 1
            self.role.close_log()
            self.role.start()
            return Tended.RUNNING
        code = self.role.poll()
        if code is None:
            return Tended.RUNNING
        if code == 0 and self.finished_ok:
            if not self.finished:
                self.finished = True
                log.info("%s finished (exit 0)", self.role.name)
            return Tended.FINISHED
        if self.gave_up:
            return Tended.GAVE_UP
        self.role.exit_codes.append(code)
        full = self.role.died_on_full_disk()
        if full is not None:  # waiting for space is no crash loop: restarted, never given up on
            delay = max(self.policy.backoff_max_s, DISK_FULL_RETRY_S)
            self.due = now + delay
            say(f"{self.role.name} died (exit {code}): disk full ({full}); restarting in {delay:.0f} s until "
                "there is space (not counted as a crash)")
            return Tended.RUNNING
        while self.recent and now - self.recent[0] > self.policy.window_s:
            self.recent.popleft()
        if len(self.recent) >= self.policy.max_restarts:
            say(f"{self.role.name} died (exit {code}) after {self.role.restarts} restarts "
                f"({len(self.recent)} within {self.policy.window_s:g} s); giving up")
            self.gave_up = True
            return Tended.GAVE_UP
        delay = self.policy.delay_s(len(self.recent))
        self.recent.append(now)
        self.due = now + delay
        window = "" if self.policy.window_s == NEVER_EXPIRES else f" within {self.policy.window_s:g} s"
        say(f"{self.role.name} died (exit {code}); restart {len(self.recent)}/{self.policy.max_restarts}{window} "
            f"in {delay:.1f} s (restart {self.role.restarts + 1} in all)")
        return Tended.RUNNING
