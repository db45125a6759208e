"""`streamrec up` supervises its roles the way Kubernetes would: a kill -9 of a
shard, of the chief trainer, of the other trainer or of the service is followed by a restart
(said on the console) and the system goes on: new passes commit, records keep being counted,
the API answers. One `up` takes the four kills in turn, so the test starts the system once."""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from ps.auth import read_secret
from ps.client import PSClient
from ps.ps_config import ClientConfig

from .test_up_e2e import Up, run_processes
from .test_up_signals import a_pass_committed, shard_endpoints

pytestmark = pytest.mark.process


def pid_of_cmdline(run_dir: Path, *words: str) -> int:
    """The pid of the run's process whose command line holds every one of ``words``."""
    for pid in run_processes(run_dir):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if all(w.encode() in argv for w in words):
            return pid
    raise AssertionError(f"no process of the run runs {words}")


def killed(up: Up) -> list[str]:
    """The roles the console said were killed and are restarting, in order."""
    return re.findall(r"(\S+) died \(exit -9\); restart", up.log.read_text())


def test_a_kill_9_of_a_shard_the_chief_the_other_trainer_or_the_service_is_survived(
        start_up: Callable[..., Up]) -> None:
    up = start_up()
    endpoints = shard_endpoints(up)
    a_pass_committed(up)
    secret = read_secret(up.run_dir / "ps-secret")
    ps = PSClient(endpoints, config=ClientConfig(timeout_s=5.0, retries=3), secret=secret)

    def trainer(rank: int) -> int:  # holders are "<hostname>:<pid>"
        return int(up.wait_for(f"rank {rank} held", lambda: ps.admin.leases().leases[rank].holder).rsplit(":", 1)[1])

    victims: list[tuple[str, Callable[[], int]]] = [
        ("server.1", lambda: int(ps.admin.health()[1]["pid"])),
        ("worker.", lambda: trainer(0)),  # the chief: commits passes, serves job control
        ("worker.", lambda: trainer(1)),
        ("service", lambda: pid_of_cmdline(up.run_dir, "serve")),
    ]
    try:
        for kills, (role, pid_of) in enumerate(victims, start=1):
            job = up.job()
            before_pass, before_records, before_regroups = job["pass"], job["records_total"], job["regroups"]
            os.kill(pid_of(), signal.SIGKILL)
            died = up.wait_for(f"{role} restarted", lambda n=kills: (d := killed(up)) and len(d) == n and d)
            assert died[-1].startswith(role), died
            # Recovered: passes commit again (one in flight at the kill may have ended before it),
            # records are counted past those of the kill, the API answers.
            up.wait_for(f"2 passes after killing {role}", lambda p=before_pass: up.job()["pass"] >= p + 2)
            up.wait_for(f"records counted after killing {role}",
                        lambda r=before_records: up.job()["records_total"] > r)
            assert up.get("/readyz")["version"] >= 1
            if role == "server.1":  # a restarted shard other than 0 is noticed (its
                # incarnation changed) and the trainers regroup from the last pass, not train on silently
                up.wait_for("a regroup after the shard restart", lambda g=before_regroups: up.job()["regroups"] > g)
    finally:
        ps.close()
    assert up.proc.poll() is None, up.output()
    assert up.ctrl_c() == 0, up.output()
    assert run_processes(up.run_dir) == []
