"""`streamrec up` and the processes around it: its shards refuse requests not
signed with the run's secret; started in the background of a script (SIGINT ignored) it still
stops cleanly on SIGINT; killed outright, it takes every role with it and frees their ports."""

from __future__ import annotations

import os
import re
import signal
import socket
import stat
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from core.errors import Forbidden, Unauthorized
from ps.auth import MIN_SECRET_BYTES, read_secret
from ps.client import PSClient
from ps.ps_config import ClientConfig

from .test_up_e2e import BOUND_S, Up, run_processes

pytestmark = pytest.mark.process


def shard_endpoints(up: Up) -> list[str]:
    found = up.wait_for("the shards", lambda: re.search(r"shards up at (\S+);", up.log.read_text()))
    return found.group(1).split(",")


def a_pass_committed(up: Up) -> None:
    up.wait_for("a pass committed", lambda: (up.job().get("pass") or 0) >= 1)


def alive(pid: int) -> bool:
    """The process runs (a zombie, dead but not yet reaped by whoever adopted it, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def port_is_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as a restarted server binds
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def test_shards_refuse_unsigned_requests_and_a_backgrounded_up_stops_on_sigint(start_up: Callable[..., Up]) -> None:
    up = start_up(sigint_ignored=True)
    endpoints = shard_endpoints(up)
    secret_file = up.run_dir / "ps-secret"
    assert stat.S_IMODE(secret_file.stat().st_mode) == 0o600
    secret = read_secret(secret_file)
    assert len(bytes.fromhex(secret.decode())) >= MIN_SECRET_BYTES

    config = ClientConfig(timeout_s=5.0, retries=0)
    with PSClient(endpoints, config=config) as unsigned:
        with pytest.raises(Unauthorized):
            unsigned.admin.stop()  # any local user could stop the shards: refused
        with pytest.raises(Unauthorized):
            unsigned.admin.health()
    with PSClient(endpoints, config=config, secret=b"x" * 32) as wrong, pytest.raises(Forbidden):
        wrong.admin.stop()
    with PSClient(endpoints, config=config, secret=secret) as signed:
        assert [h["index"] for h in signed.admin.health()] == [0, 1]  # still up
    assert "refused a request" in (up.run_dir / "logs" / "server.0.log").read_text()
    a_pass_committed(up)  # trainers and the service hold the secret: training goes on

    assert up.ctrl_c() == 0, up.output()  # SIGINT, though started with SIGINT ignored
    assert "streamrec up: stopping" in up.output() and "streamrec up: stopped" in up.output()
    assert run_processes(up.run_dir) == [], "SIGINT left processes behind"


def test_kill_9_of_up_takes_every_role_with_it_and_frees_the_ports(start_up: Callable[..., Up]) -> None:
    up = start_up()
    ports = [int(e.rsplit(":", 1)[1]) for e in shard_endpoints(up)] + [up.port]
    a_pass_committed(up)  # every role runs: the shards, both trainers, the service, the generator
    roles = [pid for pid in run_processes(up.run_dir) if pid != up.proc.pid]
    assert len(roles) >= 6, roles  # broker, generator, service, 2 shards, 2 trainers
    assert up.proc.pid not in {os.getpgid(pid) for pid in roles}  # not killed with `up`'s group: by the kernel

    os.kill(up.proc.pid, signal.SIGKILL)  # `up` alone, not its process group
    up.proc.wait()
    deadline = time.monotonic() + BOUND_S
    while (left := run_processes(up.run_dir)) or not all(port_is_free(p) for p in ports):
        assert time.monotonic() < deadline, f"left after kill -9 of up: {left}, ports {ports}"
        time.sleep(0.2)
    assert not [pid for pid in roles if alive(pid)]
