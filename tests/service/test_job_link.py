"""The service's link to the training job follows control.json (job_control_file): whichever
trainer holds rank 0 writes its endpoint there, and a new chief's endpoint replaces the old."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from service.job import JobLink
from service.settings import ServiceSettings
from tables.errors import ConfigError, Unavailable
from tables.yaml_config import validate_config
from trainer.control import ControlServer


class Chief:
    def __init__(self, name: str) -> None:
        self.name = name

    def status(self) -> dict[str, Any]:
        return {"chief": self.name}


def test_the_link_reads_the_endpoint_from_the_file_before_each_call(tmp_path: Path) -> None:
    control = tmp_path / "control.json"
    link = JobLink(None, timeout_s=10, endpoint_file=str(control))
    assert link.connected
    with pytest.raises(Unavailable, match="names no endpoint"):
        link.call("status")
    first = ControlServer(Chief("first")).start()  # type: ignore[arg-type]
    second = ControlServer(Chief("second")).start()  # type: ignore[arg-type]
    try:
        control.write_text(json.dumps({"endpoint": first.endpoint, "rank": 0}))
        assert link.call("status") == {"chief": "first"}
        control.write_text(json.dumps({"endpoint": second.endpoint, "rank": 0}))  # the chief was replaced
        assert link.call("status") == {"chief": "second"} and link.endpoint == second.endpoint
    finally:
        link.stop()
        first.stop()
        second.stop()


def test_a_fixed_endpoint_and_a_file_are_exclusive() -> None:
    with pytest.raises(ConfigError, match="not both"):
        validate_config({"exports_dir": "x", "job_control": "tcp://a:1", "job_control_file": "/c.json"},
                        ServiceSettings, "service.yaml")
