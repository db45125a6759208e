"""`streamrec up` refuses what it cannot run, at once and by name: a second `up` on a run directory
another one holds (the lock names the owner; the first one's secret and training are untouched,
and a lock left by a `up` killed with kill -9 does not block the next), and an API port another
process holds (before anything starts, and when the service's own bind fails: no restarts)."""

from __future__ import annotations

import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from launcher.restart_policy import RestartPolicy
from launcher.up_roles import UpRoles

from .conftest import SMALL_UP
from .test_up_e2e import BOUND_S, Up, run_processes

pytestmark = pytest.mark.process


def passes(up: Up) -> int:
    return int(up.job().get("pass") or 0)


def test_a_second_up_on_a_run_directory_is_refused_and_a_dead_ones_lock_does_not_block(
        start_up: Callable[..., Up]) -> None:
    first = start_up()
    done = first.wait_for("a pass committed", lambda: passes(first) >= 1 and passes(first))
    secret = (first.run_dir / "ps-secret").read_bytes()

    second = start_up()
    assert second.proc.wait(timeout=BOUND_S) == 1, second.output()
    said = second.output()
    assert f"run directory {first.run_dir} is in use by another streamrec up (pid {first.proc.pid} on " \
           f"{socket.gethostname()}" in said, said
    assert "embedded Kafka broker" not in said  # refused before it started anything
    assert (first.run_dir / "ps-secret").read_bytes() == secret  # the first one's shards still accept its trainers
    first.wait_for("the first one trains on", lambda: passes(first) > done)

    os.kill(first.proc.pid, signal.SIGKILL)  # dies holding the lock: the kernel releases it
    first.proc.wait()
    deadline = time.monotonic() + BOUND_S
    while run_processes(first.run_dir):
        assert time.monotonic() < deadline, "roles left after kill -9 of up"
        time.sleep(0.2)
    third = start_up()
    third.wait_for("a pass committed after the restart", lambda: passes(third) > done)
    assert third.ctrl_c() == 0, third.output()
    assert run_processes(third.run_dir) == []


def test_a_taken_api_port_fails_up_before_it_starts_anything(tmp_path: Path) -> None:
    config = tmp_path / "streamrec.yaml"
    config.write_text(yaml.safe_dump(SMALL_UP))
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        up = Up(tmp_path / "run", config, port)
        try:
            assert up.proc.wait(timeout=BOUND_S) == 1, up.output()
        finally:
            up.kill()
    said = up.output()
    assert f"port {port} is in use" in said, said
    assert "embedded Kafka broker" not in said and "died" not in said  # nothing started, nothing restarted
    assert not (tmp_path / "run" / "ps-secret").exists()


def test_a_service_that_cannot_bind_its_port_fails_the_run_without_restarts(tmp_path: Path) -> None:
    roles = UpRoles(tmp_path, restart=RestartPolicy(backoff_s=0.0))
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        serve = f"import uvicorn; uvicorn.run(lambda *a: None, host='127.0.0.1', port={port})"  # a real bind
        role = roles.start("service", [sys.executable, "-c", serve], env=dict(os.environ), port=port)
        said: list[str] = []
        deadline = time.monotonic() + BOUND_S
        try:
            while (reason := roles.tend(said.append)) is None:
                assert time.monotonic() < deadline, f"not failed: {role.state()} {said}"
                time.sleep(0.05)
        finally:
            role.kill()
            if role.proc is not None:
                role.proc.wait()
            role.close_log()
    assert f"port {port} is in use: service could not listen on it" in reason, reason
    assert role.restarts == 0 and not said  # not restarted: it would only fail the same way
    assert "address already in use" in role.log_path.read_text().lower()
