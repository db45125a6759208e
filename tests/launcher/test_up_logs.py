"""`streamrec up` renders the root's `logging:` section into every role: with `format: json` every
line of every role's log (shards, trainers, service, generator, up's own) is one JSON object naming
its role; the start is quiet (no warning of ours anywhere); the chief logs its committed passes (records,
AUC) and bundles, the service its bundle loads and each request with its id, up a killed trainer's
death and restart, and the restarted trainer where it resumed from."""

from __future__ import annotations

import json
import os
import signal
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from launcher.launch import free_ports

from .conftest import SMALL_UP
from .test_up_e2e import Up, run_processes
from .test_up_signals import a_pass_committed

pytestmark = pytest.mark.process

HEADER = "=== streamrec launch: starting "  # the line the supervisor writes at each start of a role
ROLE_OF_LOG = {"server": "shard.", "worker": "worker", "service": "service", "generator": "generator", "up": "up"}


@pytest.fixture
def json_up(tmp_path: Path) -> Iterator[Up]:
    config = tmp_path / "streamrec.yaml"
    config.write_text(yaml.safe_dump({**SMALL_UP, "logging": {"format": "json"}}))
    (port,) = free_ports(1)
    up = Up(tmp_path / "run", config, port)
    yield up
    up.kill()


def records(path: Path) -> list[dict[str, Any]]:
    """The log's records; a line that is neither a start header nor a JSON object fails here."""
    out = []
    for line in path.read_text(errors="replace").splitlines():
        if line.startswith(HEADER):
            continue
        obj = json.loads(line)  # a role's last line is its JSON result on stdout, logged or not
        if "logger" in obj:
            out.append(obj)
    return out


def all_logs(up: Up) -> dict[str, list[dict[str, Any]]]:
    return {p.stem: records(p) for p in sorted((up.run_dir / "logs").glob("*.log")) if p.stem != "broker"}


def test_every_role_logs_json_lines_of_its_lifecycle(json_up: Up) -> None:
    up = json_up
    a_pass_committed(up)
    up.wait_for("a bundle served", lambda: up.get("/readyz")["version"] >= 1)
    request = urllib.request.Request(f"{up.api}/healthz", headers={"X-Request-ID": "up-logs-1"})
    with urllib.request.urlopen(request, timeout=10) as r:
        assert r.headers["X-Request-ID"] == "up-logs-1"
    # written once the response went out, so looked for until it is there
    service_log = up.run_dir / "logs" / "service.log"
    up.wait_for("the request's access line", lambda: any(
        o.get("request_id") == "up-logs-1" and o["path"] == "/healthz" for o in records(service_log)))

    logs = all_logs(up)
    assert {"up", "service", "generator", "server.0", "server.1", "worker.0", "worker.1"} <= set(logs)
    for name, objs in logs.items():
        assert objs, name
        assert {o["role"].startswith(ROLE_OF_LOG[name.split(".")[0]]) for o in objs} == {True}, name
    # the Kafka client's own warnings (a slow poll on a loaded machine) are its diagnostics, not the system's
    quiet = [(name, o["message"]) for name, objs in logs.items() for o in objs
             if o["level"] != "info" and not o["logger"].startswith("kafka.")]
    assert quiet == []
    workers = [o for name, objs in logs.items() if name.startswith("worker") for o in objs]
    committed = [o for o in workers if o["logger"] == "trainer.pass_commit" and "records_total" in o]
    assert committed and all(o["role"] == "worker.0" and o["records"] >= 0 for o in committed)
    assert any(o["logger"] == "trainer.export" and o["version"] >= 1 for o in workers)
    served = [o for o in logs["service"] if o["logger"] == "streamrec.service" and "version" in o]
    assert served and served[0]["version"] == 1
    started = [o["message"] for o in logs["up"] if o["logger"] == "launcher.role_process"]
    assert {m.split()[0] for m in started} == {"generator", "service", "server.0", "server.1", "worker.0", "worker.1"}

    # a trainer killed: up says it died and started it again; the new process says where it resumed
    victim = next(int(m.split("(pid ")[1].split(",")[0]) for m in started if m.startswith("worker.1 "))
    os.kill(victim, signal.SIGKILL)
    up.wait_for("worker.1 restarted", lambda: any("worker.1 started" in o["message"] and "restart 1" in o["message"]
                                                 for o in records(up.run_dir / "logs" / "up.log")))
    assert any(o["message"].startswith("worker.1 died (exit -9)") for o in records(up.run_dir / "logs" / "up.log"))

    def resumed() -> bool:
        text = (up.run_dir / "logs" / "worker.1.log").read_text(errors="replace")
        after = text[text.rfind(HEADER):].splitlines()[1:]
        return any(json.loads(line)["logger"] == "trainer.recovery" for line in after)

    up.wait_for("the restarted trainer's recovery line", resumed)
    assert up.ctrl_c() == 0, up.output()
    assert run_processes(up.run_dir) == []
