"""One role of a local job (a shard, a worker, a generator, the service): a child process in its
own process group, logging to its own file, and killed by the kernel when the process that
started it ends (:mod:`core.processes`: a supervisor killed with ``kill -9`` leaves nothing).
Start a role from a thread that lives as long as the role should: the kernel's parent-death
signal follows the thread that started it.

The process group is the point: a role may start children of its own (uvicorn workers, a
producer's threads), and killing the group reaps them too, so a stopped job leaves nothing
behind. The same role can be started again (a shard restarted after a crash); each start
appends a header line to the log, so one file tells the role's whole story.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from core.errors import DISK_FULL_TEXT
from core.fork_server import ForkedProcess, ForkServer
from core.processes import dies_with_parent

log = logging.getLogger(__name__)
START_HEADER = b"=== streamrec launch: starting "  # each start's first line in the role's log
# what a role's log says when a write failed for want of space or on a failing device
DISK_FULL_LOG_TEXT = tuple(text.encode() for text in DISK_FULL_TEXT)
TAIL_BYTES = 16384
TAIL_LINES = 30
_DUMP_S = 0.5  # for a hung role to write its stacks before the SIGKILL


@dataclass
class RoleProcess:
    """A named command run with ``env``, its output appended to ``log_path``."""

    name: str
    argv: list[str]
    env: Mapping[str, str]
    log_path: Path
    proc: subprocess.Popen | ForkedProcess | None = None  # None until started
    log: IO[bytes] | None = None
    restarts: int = 0
    exit_codes: list[int] = field(default_factory=list)
    forker: ForkServer | None = None  # set: forked from this warm parent where the command allows

    def start(self) -> None:
        # Unbuffered: a header a full disk refused is not kept in a buffer for close() to fail on.
        self.log = open(self.log_path, "ab", buffering=0)  # noqa: SIM115 - stays open for the process's life
        with contextlib.suppress(OSError):  # a full disk: the role starts all the same
            self.log.write(START_HEADER + f"{self.name} (restart {self.restarts})\n".encode())
            self.log.flush()
        self.proc = self._forked()
        if self.proc is None:
            self.proc = subprocess.Popen(self.argv, env=dict(self.env), stdout=self.log, stderr=subprocess.STDOUT,
                                         start_new_session=True,  # own process group: we can kill its children too
                                         preexec_fn=dies_with_parent())
        log.info("%s started (pid %d, restart %d), logging to %s", self.name, self.proc.pid, self.restarts,
                 self.log_path)

    def _forked(self) -> ForkedProcess | None:
        if self.forker is None or not self.forker.can_start(self.argv):
            return None
        assert self.log is not None
        try:
            return self.forker.start_role(self.argv, self.env, self.log)
        except OSError as err:  # the role starts all the same, by exec
            log.warning("%s: fork server unavailable (%s); starting it by exec", self.name, err)
            return None

    def poll(self) -> int | None:
        """The exit code once the process ended, None while it runs (it must have been started)."""
        assert self.proc is not None
        return self.proc.poll()

    def exit_code(self) -> int | None:
        """The exit code once the process ended; None while it runs or before it was started."""
        return self.proc.poll() if self.proc is not None else None

    def run_log_tail(self) -> bytes:
        """The last :data:`TAIL_BYTES` of the log, from this run's start on (b'' when unreadable)."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(max(0, f.seek(0, os.SEEK_END) - TAIL_BYTES))
                tail = f.read()
        except OSError:
            return b""
        return tail[tail.rfind(START_HEADER) + 1:]  # this run's, not an earlier one's

    def died_on_full_disk(self) -> str | None:
        """What the end of this run's log says of a full disk (None: nothing; the run ended otherwise)."""
        for line in reversed(self.run_log_tail().splitlines()[-TAIL_LINES:]):  # how it ended, not what it survived
            if any(t in line for t in DISK_FULL_LOG_TEXT):
                return line.decode(errors="replace").strip()[-200:]
        return None

    def state(self) -> str:
        """``starting``, ``running`` or ``exited N``, then the restarts and the last exit code
        (``running (restart 2, last exit -9)``): what a console shows."""
        if self.proc is None:
            return "starting"
        code = self.proc.poll()
        state = "running" if code is None else f"exited {code}"
        if self.restarts:
            last = self.exit_codes[-1] if code is None and self.exit_codes else None
            state += f" (restart {self.restarts}" + (f", last exit {last})" if last is not None else ")")
        return state

    def wait(self, timeout_s: float) -> int | None:
        """Wait up to ``timeout_s`` for the process to end: its exit code, or None if it still runs."""
        if self.proc is None:
            return None
        with contextlib.suppress(subprocess.TimeoutExpired):
            return self.proc.wait(timeout=timeout_s)
        return None

    def dump_stacks(self) -> None:
        """Ask a role that outlived its grace for its threads' stacks (SIGUSR1, which every
        ``streamrec`` command answers into its log), so why it hung can be read after the kill."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGUSR1)  # the role itself, not its group's children
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=_DUMP_S)

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` to the whole process group, if the process still runs."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)

    def close_log(self) -> None:
        if self.log is not None:
            with contextlib.suppress(OSError):  # the supervisor goes on whatever the disk says
                self.log.close()
