"""The processes of one `up` run: a dead role restarts with back-off until its budget is spent (a
replay that reached the end of its file has finished), what the console shows for each role,
and the record source's commands."""

from __future__ import annotations

import os
import sys
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

import pytest

from launcher.restart_policy import RestartPolicy, Supervised, Tended
from launcher.role_process import RoleProcess
from launcher.system_config import StreamrecConfig
from launcher.up_roles import UpRoles
from launcher.up_source import record_source


def _exit_with(code: int) -> list[str]:
    return [sys.executable, "-c", f"import sys; sys.exit({code})"]


def _tend_until(roles: UpRoles, said: list[str], done: Callable[[], bool]) -> str | None:
    """Tend the roles (as the watch loop does) until ``done()``; the last failure reason."""
    deadline = time.monotonic() + 60
    reason = None
    while not done():
        assert time.monotonic() < deadline, said
        reason = roles.tend(said.append)
        time.sleep(0.01)
    return reason


@pytest.mark.process
def test_a_finished_replay_stays_finished_and_a_dead_role_restarts_until_its_budget_is_spent(tmp_path: Path) -> None:
    said: list[str] = []
    roles = UpRoles(tmp_path, restart=RestartPolicy(max_restarts=2, window_s=600, backoff_s=0.0))
    replay = roles.start("replay", _exit_with(0), env=dict(os.environ))
    replay.wait(30)
    assert roles.tend(said.append) is None and said == []
    assert roles.states() == {"replay": "exited 0"}
    generator = roles.start("generator", _exit_with(3), env=dict(os.environ))
    reason = _tend_until(roles, said, lambda: bool(said) and said[-1].endswith("giving up"))
    assert generator.restarts == 2 and generator.exit_codes == [3, 3, 3]
    assert reason == f"generator exited 3 too often; see {tmp_path / 'generator.log'}"
    assert said[0] == "generator died (exit 3); restart 1/2 within 600 s in 0.0 s (restart 1 in all)"
    assert roles.states()["generator"] == "exited 3 (restart 2)"
    assert (tmp_path / "generator.log").read_text().count("=== streamrec launch: starting generator") == 3
    for role in roles.own:
        role.close_log()


@pytest.mark.process
def test_restarts_back_off_exponentially_and_the_window_forgets_old_ones(tmp_path: Path) -> None:
    policy = RestartPolicy(max_restarts=3, window_s=10.0, backoff_s=0.5, backoff_max_s=1.5)
    assert [policy.delay_s(n) for n in range(4)] == [0.5, 1.0, 1.5, 1.5]
    now = [0.0]  # the supervisor's clock, moved by the test: no waiting on back-offs
    role = RoleProcess("x", _exit_with(1), dict(os.environ), tmp_path / "x.log")
    role.start()
    sup = Supervised(role, policy, clock=lambda: now[0])
    said: list[str] = []
    for _ in range(3):  # three deaths in quick succession: 0.5, 1.0, 1.5 s back-offs
        role.wait(30)
        assert sup.tend(said.append) is Tended.RUNNING and sup.due is not None
        now[0] = sup.due
        assert sup.tend(said.append) is Tended.RUNNING  # started again
    assert [m.split(" in ")[1] for m in said] == ["0.5 s (restart 1", "1.0 s (restart 2", "1.5 s (restart 3"]
    role.wait(30)
    assert sup.tend(said.append) is Tended.GAVE_UP  # the 4th death within 10 s
    later = Supervised(role, policy, clock=lambda: now[0], recent=deque([0.0, 0.5, 1.0]))
    now[0] = 20.0  # the window has forgotten those three
    assert later.tend(said.append) is Tended.RUNNING and said[-1].endswith("in 0.5 s (restart 4 in all)")
    role.close_log()


def test_the_source_is_the_replay_when_given_else_the_generator_resuming(tmp_path: Path) -> None:
    cfg = StreamrecConfig()
    config = tmp_path / "streamrec.yaml"
    since = {0: 5, 1: 0, 2: 7, 3: 0}
    replay = record_source(cfg, config=config, replay=tmp_path / "events.jsonl", replay_format="criteo", skip=0,
                           since=since)
    assert replay.name == "replay"
    # as fast as the trainers take it: no rate, paused past four polls per trainer (up.replay)
    assert replay.argv[-10:] == ["--file", str(tmp_path / "events.jsonl"), "--format", "criteo", "--config",
                                 str(config), "--max-lag", str(4 * 4096 * 2), "--since-offsets", "0:5,1:0,2:7,3:0"]
    capped = StreamrecConfig.model_validate({"up": {"replay": {"rate": 300, "max_lag": 50}}})
    argv = record_source(capped, config=config, replay=tmp_path / "e", replay_format="json", skip=0, since=since).argv
    assert argv[argv.index("--rate") + 1] == "300.0" and argv[argv.index("--max-lag") + 1] == "50"
    generator = record_source(cfg, config=config, replay=None, replay_format="json", skip=1234, since=since)
    assert generator.name == "generator"
    assert generator.argv[-4:] == ["--skip", "1234", "--since-offsets", "0:5,1:0,2:7,3:0"]
