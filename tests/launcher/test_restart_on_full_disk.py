"""A role that dies on a full disk (a real tmpfs too small for what it writes) is not in a crash
loop: its supervisor says "disk full" and starts it again every few seconds, past its restart
budget, until there is space; a role that dies otherwise is still given up on."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import pytest

from launcher.restart_policy import DISK_FULL_RETRY_S, RestartPolicy, Supervised, Tended
from launcher.role_process import RoleProcess
from tests.trainer.small_disk import small_disk

pytestmark = pytest.mark.process

POLICY = RestartPolicy(max_restarts=1, window_s=300.0, backoff_s=0.0, backoff_max_s=0.0)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _until_exit(sup: Supervised, said: list[str]) -> Tended:
    """Tend the role until it ended and was dealt with (its process is waited for, not slept on)."""
    assert sup.role.wait(120) is not None, "the role did not end"
    return sup.tend(said.append)


def test_a_role_dying_on_a_full_disk_is_restarted_until_there_is_space(tmp_path: Path) -> None:
    with small_disk(tmp_path / "disk", "1m") as disk:
        script = f"open({str(disk.path / 'data')!r}, 'wb').write(b'x' * (2 << 20))"
        role = RoleProcess("writer", [sys.executable, "-c", script], {}, tmp_path / "writer.log")
        clock = Clock()
        sup = Supervised(role, POLICY, finished_ok=True, clock=clock)
        said: list[str] = []
        role.start()
        for _ in range(3):  # three deaths: past a budget of one restart
            assert _until_exit(sup, said) is Tended.RUNNING
            assert "disk full" in said[-1] and "No space left on device" in said[-1], said
            clock.now += DISK_FULL_RETRY_S
            assert sup.tend(said.append) is Tended.RUNNING  # started again
        assert role.restarts == 3 and not sup.gave_up and len(sup.recent) == 0
        disk.resize("8m")  # space is back
        assert _until_exit(sup, said) is Tended.FINISHED and len(said) == 3


def test_a_role_dying_otherwise_is_still_given_up_on(tmp_path: Path) -> None:
    role = RoleProcess("crasher", [sys.executable, "-c", "raise SystemExit(3)"], {}, tmp_path / "crasher.log")
    clock = Clock()
    sup = Supervised(role, POLICY, clock=clock)
    said: list[str] = []
    role.start()
    assert _until_exit(sup, said) is Tended.RUNNING and "restart 1/1" in said[-1]
    assert sup.tend(said.append) is Tended.RUNNING
    assert _until_exit(sup, said) is Tended.GAVE_UP and "giving up" in said[-1]


def test_a_role_started_on_a_full_disk_is_tended_and_closed_without_an_error(tmp_path: Path) -> None:
    with small_disk(tmp_path / "disk", "1m") as disk:
        (disk.path / "ballast").write_bytes(b"")
        with contextlib.suppress(OSError), open(disk.path / "ballast", "wb") as f:  # the disk, full
            f.write(b"x" * (2 << 20))
        role = RoleProcess("quiet", [sys.executable, "-c", "pass"], {}, disk.path / "quiet.log")
        sup = Supervised(role, POLICY, finished_ok=True)
        role.start()  # its log's header does not fit: it starts all the same
        assert _until_exit(sup, []) is Tended.FINISHED
        role.close_log()  # nothing left to flush, nothing raised
        assert role.log is not None and role.log.closed
