"""streamrec launch: real shards and workers, per-role logs, exit codes, shard restarts."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Collection
from pathlib import Path

import numpy as np
import pytest
import yaml

from launcher.launch import Launcher, LaunchSpec

pytestmark = pytest.mark.process

REPO = Path(__file__).resolve().parents[2]
WORKER = REPO / "tests" / "ps" / "worker_process.py"
SGD1 = {"name": "sgd1", "dim": 4, "optimizer": {"kind": "sgd", "lr": 1.0}, "initializer": {"kind": "zeros"}}


def _config(tmp: Path) -> Path:
    path = tmp / "ps.yaml"
    # retries long enough to ride out a shard restart
    path.write_text(yaml.safe_dump({"tables": [SGD1], "client": {"timeout_s": 1.0, "retries": 30}}))
    return path


def test_cli_exits_non_zero_when_a_worker_fails_and_logs_every_role(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    cmd = [sys.executable, "-m", "cli", "launch", "--servers", "2", "--workers", "2", "--config",
           str(_config(tmp_path)), "--log-dir", str(logs), "--", sys.executable, str(WORKER), "fail", "1", "1", "1",
           "1"]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "worker.1 exited 3" in done.stderr
    # one log per role, and the launcher's own (what it said, and each role's start and exit)
    assert sorted(p.name for p in logs.glob("*.log")) == ["launch.log", "server.0.log", "server.1.log", "worker.0.log",
                                                          "worker.1.log"]
    assert "serving" in (logs / "server.0.log").read_text()
    assert "worker.1 exited 3" in (logs / "launch.log").read_text()


def test_launch_succeeds_when_workers_succeed(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "cli", "launch", "--servers", "1", "--workers", "2", "--config",
           str(_config(tmp_path)), "--log-dir", str(tmp_path / "logs"), "--", sys.executable, str(WORKER), "async",
           "2", "50", "20"]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr + (tmp_path / "logs" / "worker.0.log").read_text()
    assert "all 2 workers finished" in done.stderr


def test_killed_shard_restarts_from_its_checkpoint_and_training_continues(tmp_path: Path) -> None:
    steps, keys = 30, 200
    progress, result = tmp_path / "progress", tmp_path / "result.npy"
    spec = LaunchSpec(servers=2, workers=1, ps_config=_config(tmp_path), log_dir=tmp_path / "logs",
                      checkpoint_dir=tmp_path / "ckpt", max_restart=1,
                      command=(sys.executable, str(WORKER), "steady", str(steps), str(keys), "0", str(progress),
                               str(result)))
    out = io.StringIO()
    launcher = Launcher(spec, out=out)
    codes: list[int] = []
    runner = threading.Thread(target=lambda: codes.append(launcher.run()))
    runner.start()
    try:
        deadline = time.monotonic() + 90
        while not (progress.exists() and len(progress.read_text().split()) >= 5):
            assert time.monotonic() < deadline and runner.is_alive(), out.getvalue()
            time.sleep(0.05)
        saved_before_kill = len(progress.read_text().split())
        victim = launcher.servers[0].proc
        assert victim is not None
        os.killpg(victim.pid, signal.SIGKILL)
        runner.join(timeout=150)
    finally:
        if runner.is_alive():  # tear everything down even when the test fails
            launcher._shutdown()
            runner.join(timeout=30)
    assert codes == [0], out.getvalue()
    assert "server.0 died" in out.getvalue() and "restart 1/1" in out.getvalue()
    assert len(progress.read_text().split()) == steps  # training continued to the end
    rows = np.load(result)
    # nothing saved before the kill is lost; at most the one acknowledged-but-unsaved step is
    assert rows.min() >= max(saved_before_kill, steps - 1)
    assert rows.max() == steps
    assert "restored" in (tmp_path / "logs" / "server.0.log").read_text()


def test_launch_with_every_worker_dead_fails_unlike_fleetrun(tmp_path: Path) -> None:
    spec = LaunchSpec(servers=1, workers=2, ps_config=_config(tmp_path), log_dir=tmp_path / "logs",
                      checkpoint_dir=tmp_path / "ckpt", command=(sys.executable, "-c", "import os; os._exit(9)"))
    out = io.StringIO()
    assert Launcher(spec, out=out).run() == 1
    assert "exited 9" in out.getvalue()


def test_a_shard_port_taken_before_it_binds_gets_new_ports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    import launcher.launch as launcher_module

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    real = launcher_module.free_ports
    calls = []

    def first_one_taken(n: int, host: str = "127.0.0.1", *, avoid: Collection[int] = ()) -> list[int]:
        calls.append(n)
        return [taken.getsockname()[1]] * n if len(calls) == 1 else real(n, host, avoid=avoid)

    monkeypatch.setattr(launcher_module, "free_ports", first_one_taken)
    spec = LaunchSpec(servers=1, workers=1, ps_config=_config(tmp_path), log_dir=tmp_path / "logs",
                      checkpoint_dir=tmp_path / "ckpt", command=(sys.executable, str(WORKER), "async", "1", "10", "5"))
    out = io.StringIO()
    try:
        assert Launcher(spec, out=out).run() == 0, out.getvalue()
    finally:
        taken.close()
    assert "on other ports (1/3)" in out.getvalue() and len(calls) == 2


def test_a_shards_metrics_port_taken_before_it_binds_is_drawn_again_with_its_port(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    import launcher.launch as launcher_module

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    taken_port = taken.getsockname()[1]
    real = launcher_module.free_ports
    calls = []

    def metrics_port_taken(n: int, host: str = "127.0.0.1", *, avoid: Collection[int] = ()) -> list[int]:
        ports = real(n, host, avoid=avoid)
        calls.append(n)
        if len(calls) == 1:
            ports[1] = taken_port  # the shard's /metrics port: [shard, its /metrics, the worker's]
        return ports

    monkeypatch.setattr(launcher_module, "free_ports", metrics_port_taken)
    spec = LaunchSpec(servers=1, workers=1, ps_config=_config(tmp_path), log_dir=tmp_path / "logs",
                      checkpoint_dir=tmp_path / "ckpt", command=(sys.executable, "-c", "pass"), metrics_ports=True)
    out = io.StringIO()
    launcher = Launcher(spec, out=out)
    worker_metrics = launcher.metrics_ports["worker.0"]
    told: list[dict[str, int]] = []
    launcher.on_replan = lambda: told.append(dict(launcher.metrics_ports))
    try:
        assert launcher.run() == 0, out.getvalue()
    finally:
        taken.close()
    assert "on other ports (1/3)" in out.getvalue() and calls == [3, 2]
    assert told == [launcher.metrics_ports] and launcher.metrics_ports["server.0"] != taken_port
    assert launcher.metrics_ports["worker.0"] == worker_metrics
    assert f"--metrics-port {launcher.metrics_ports['server.0']}" in " ".join(launcher.servers[0].argv)


def test_cli_names_a_missing_config() -> None:
    done = subprocess.run([sys.executable, "-m", "cli", "launch", "--servers", "1", "--workers", "1", "--config",
                           "/nonexistent/ps.yaml", "--", "true"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.startswith("streamrec launch: --config /nonexistent/ps.yaml: no such file")


def test_spec_env_reaches_every_role_without_touching_ours(tmp_path: Path) -> None:
    from launcher.launch import THREAD_LIMIT_VARS, thread_limits

    check = "import os, sys; sys.exit(0 if all(os.environ[v] == '2' for v in sys.argv[1:]) else 7)"
    spec = LaunchSpec(servers=1, workers=2, ps_config=_config(tmp_path), log_dir=tmp_path / "logs",
                      checkpoint_dir=tmp_path / "ckpt", command=(sys.executable, "-c", check, *THREAD_LIMIT_VARS),
                      env=thread_limits(2))
    before = dict(os.environ)
    out = io.StringIO()
    assert Launcher(spec, out=out).run() == 0, out.getvalue()
    assert dict(os.environ) == before


def test_a_role_that_outlives_its_grace_leaves_its_stacks_in_its_log_then_is_killed(tmp_path: Path) -> None:
    from launcher.launch import _stop
    from launcher.role_process import RoleProcess

    # As a hung streamrec role: SIGUSR1 answered with the stacks (as cli.main registers), SIGTERM ignored.
    hang = ("import faulthandler, signal, sys, time\n"
            "faulthandler.register(signal.SIGUSR1, all_threads=True)\n"
            "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
            "def stuck_in_a_barrier():\n"
            "    print('ready', flush=True)\n"
            "    while True: time.sleep(0.05)\n"
            "stuck_in_a_barrier()\n")
    role = RoleProcess("worker.0", [sys.executable, "-c", hang], dict(os.environ), tmp_path / "worker.0.log")
    role.start()
    deadline = time.monotonic() + 60
    while b"ready" not in role.log_path.read_bytes():
        assert time.monotonic() < deadline and role.poll() is None
        time.sleep(0.05)
    _stop([role], signal.SIGTERM, 0.3)
    assert role.poll() == -signal.SIGKILL
    log = role.log_path.read_text()
    assert "most recent call first" in log and "in stuck_in_a_barrier" in log, log
