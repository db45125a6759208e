"""Roles forked from the warm parent behave as exec'd ones: their log, environment, process group,
command line, exit codes (a signal's as Popen reports it), and none outlives the launcher's end."""

from __future__ import annotations

import io
import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from core.fork_server import ForkedProcess, ForkServer, StartMethod
from launcher.launch import thread_limits
from launcher.role_process import RoleProcess

pytestmark = pytest.mark.process

CHILD = """
import os, signal, sys, time
print("role", sys.argv[1:], os.environ["ROLE_VAR"], os.getpgid(0) == os.getpid(), flush=True)
if sys.argv[1] == "wait":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(5))
    print("ready", flush=True)
    time.sleep(600)
raise SystemExit(int(sys.argv[1]))
"""


def _wait_for(path: Path, text: str, role: RoleProcess) -> None:
    while text not in path.read_text():
        assert role.wait(0.05) is None, path.read_text()


def test_forked_roles_behave_as_exec_ones(tmp_path: Path) -> None:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    server = ForkServer({**os.environ, **thread_limits(1)})  # no BLAS pool: a process that may fork
    env = {**os.environ, "ROLE_VAR": "seen"}
    try:
        done = RoleProcess("done", [sys.executable, str(script), "3"], env, tmp_path / "done.log", forker=server)
        done.start()
        assert isinstance(done.proc, ForkedProcess)
        assert done.wait(120) == 3
        assert "role ['3'] seen True" in (tmp_path / "done.log").read_text()

        waits = []
        for name in ("term", "killed", "orphan"):
            role = RoleProcess(name, [sys.executable, str(script), "wait"], env, tmp_path / f"{name}.log",
                               forker=server)
            role.start()
            _wait_for(tmp_path / f"{name}.log", "ready", role)
            waits.append(role)
        term, killed, orphan = waits
        # found by its command as an exec'd role is (ps, pgrep -f), not shown as the server's
        shown = [arg for arg in Path(f"/proc/{term.proc.pid}/cmdline").read_bytes().split(b"\0") if arg]
        assert shown == [os.fsencode(arg) for arg in term.argv]
        term.kill(signal.SIGTERM)
        assert term.wait(60) == 5
        killed.kill()
        assert killed.wait(60) == -signal.SIGKILL
    finally:
        server.close()  # the launcher's end: the server kills what still runs
    assert orphan.wait(60) == -signal.SIGKILL
    while _alive(orphan.proc.pid):  # the server killed its group as it ended
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def test_a_module_role_runs_as_python_dash_m(tmp_path: Path) -> None:
    server = ForkServer({**os.environ, **thread_limits(1)})  # no BLAS pool: a process that may fork
    try:
        role = RoleProcess("cli", [sys.executable, "-m", "cli", "schema", "--help"], dict(os.environ),
                           tmp_path / "cli.log", forker=server)
        role.start()
        assert isinstance(role.proc, ForkedProcess)
        assert role.wait(120) == 0
        assert "usage:" in (tmp_path / "cli.log").read_text()
    finally:
        server.close()


def test_forked_shards_are_asked_whether_they_are_healthy_only_once_they_listen(tmp_path: Path) -> None:
    """A forked shard binds within the probe's timeout of its start: a probe queued before then
    would reach it signed before it started and be refused (a warning in its log)."""
    from launcher.launch import Launcher, LaunchSpec
    from launcher.up_run_dir import ps_secret

    config = tmp_path / "ps.yaml"
    config.write_text(yaml.safe_dump({"tables": [{"name": "t", "dim": 4}]}))
    spec = LaunchSpec(servers=2, workers=1, command=(sys.executable, "-c", "pass"), ps_config=config,
                      log_dir=tmp_path / "logs", checkpoint_dir=tmp_path / "ckpt", secret_file=ps_secret(tmp_path),
                      env=thread_limits(1), start_method=StartMethod.FORK_SERVER)
    out = io.StringIO()
    assert Launcher(spec, out=out).run() == 0, out.getvalue()
    for i in range(2):
        log = (tmp_path / "logs" / f"server.{i}.log").read_text()
        assert "serving" in log and "refused a request" not in log, log


def test_roles_started_from_several_threads_at_once_each_get_their_own_process(tmp_path: Path) -> None:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    server = ForkServer({**os.environ, **thread_limits(1)})  # no BLAS pool: a process that may fork
    env = {**os.environ, "ROLE_VAR": "seen"}
    codes = list(range(10, 18))
    roles = [RoleProcess(f"r{code}", [sys.executable, str(script), str(code)], env, tmp_path / f"r{code}.log",
                         forker=server) for code in codes]
    try:
        roles[0].start()  # the server follows the thread that started it (its parent-death signal): this one
        threads = [threading.Thread(target=role.start) for role in roles[1:]]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert all(isinstance(role.proc, ForkedProcess) for role in roles)
        assert [role.wait(120) for role in roles] == codes
    finally:
        server.close()
