"""The processes of one `up` run: which exits fail the run (a replay that reached the end of its
file does not), what the console shows for each role, and the record source's commands."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from deploy.system_config import StreamrecConfig
from deploy.up_roles import UpRoles
from deploy.up_source import record_source


def _exit_with(code: int) -> list[str]:
    return [sys.executable, "-c", f"import sys; sys.exit({code})"]


def test_a_finished_replay_is_not_a_failure_but_any_other_exit_is(tmp_path: Path) -> None:
    roles = UpRoles(tmp_path)
    replay = roles.start("replay", _exit_with(0), env=dict(os.environ))
    replay.wait(30)
    assert roles.failure() is None
    assert roles.states() == {"replay": "exited 0"}
    generator = roles.start("generator", _exit_with(0), env=dict(os.environ))
    generator.wait(30)
    assert roles.failure() == f"generator exited 0; see {tmp_path / 'generator.log'}"
    for role in roles.own:
        role.close_log()


def test_the_source_is_the_replay_when_given_else_the_generator_resuming(tmp_path: Path) -> None:
    cfg = StreamrecConfig()
    config = tmp_path / "streamrec.yaml"
    replay = record_source(cfg, config=config, replay=tmp_path / "events.jsonl", replay_format="criteo", skip=0)
    assert replay.name == "replay"
    assert replay.argv[-8:] == ["--file", str(tmp_path / "events.jsonl"), "--format", "criteo", "--config",
                                str(config), "--rate", str(cfg.up.generator.rate)]
    generator = record_source(cfg, config=config, replay=None, replay_format="json", skip=1234)
    assert generator.name == "generator" and generator.argv[-2:] == ["--skip", "1234"]
