"""The service's link to the training job follows control.json (job_control_file, a path or an
object-store URL): whichever trainer holds rank 0 writes its endpoint there, and a new chief's
endpoint replaces the old."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from core.errors import ConfigError, Unavailable
from core.yaml_config import validate_config
from jobcontrol.channel import ControlServer
from service.job import JobLink
from service.settings import ServiceSettings
from stores.store import open_store


class Chief:
    def __init__(self, name: str) -> None:
        self.name = name

    def status(self) -> dict[str, Any]:
        return {"chief": self.name}


@pytest.mark.parametrize("where", ["local", "object store"])
def test_the_link_reads_the_endpoint_from_the_file_before_each_call(tmp_path: Path, where: str) -> None:
    root = str(tmp_path / "ck") if where == "local" else f"memory://streamrec-{uuid.uuid4().hex}/ck"
    store = open_store(root)  # the checkpoint root the chief writes control.json under
    link = JobLink(None, timeout_s=10, endpoint_file=f"{root}/control.json")
    assert link.connected
    with pytest.raises(Unavailable, match="names no endpoint"):
        link.call("status")
    first = ControlServer(Chief("first")).start()
    second = ControlServer(Chief("second")).start()
    try:
        store.write_json("control.json", {"endpoint": first.endpoint, "rank": 0})
        assert link.call("status") == {"chief": "first"}
        store.write_json("control.json", {"endpoint": second.endpoint, "rank": 0})  # the chief was replaced
        assert link.call("status") == {"chief": "second"} and link.endpoint == second.endpoint
    finally:
        link.stop()
        first.stop()
        second.stop()


def test_a_fixed_endpoint_and_a_file_are_exclusive() -> None:
    with pytest.raises(ConfigError, match="not both"):
        validate_config({"exports_dir": "x", "job_control": "tcp://a:1", "job_control_file": "/c.json"},
                        ServiceSettings, "service.yaml")
