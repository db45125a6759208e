"""`streamrec up --replay FILE` stopped and started again with the same command (the embedded
broker, whose log lived in its memory, starts empty): the replay goes on after the lines the
last committed pass trained and the trainers' offsets are mapped onto the new log, so over both
runs every line is trained exactly once, and the job's ``records_total`` says so."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from launcher.launch import free_ports
from logrecords.generator import PlantedModel
from logrecords.sample_encoding import write_dataset
from trainer import checkpoints

from .conftest import SMALL_UP
from .test_up_e2e import Up

pytestmark = pytest.mark.process

RECORDS = 3000
RATE = 300  # lines per second: the first run is stopped partway


def newest_pass(run_dir: Path) -> dict:
    root = run_dir / "checkpoints"
    done = checkpoints.complete_passes(root) if root.is_dir() else []
    return checkpoints.read_pass(root, done[-1]) if done else {"records_total": 0, "offsets": {}}


@pytest.fixture
def ups() -> Iterator[list[Up]]:
    started: list[Up] = []
    yield started
    for up in started:
        up.kill()


def test_a_resumed_replay_trains_each_line_once(ups: list[Up], tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    write_dataset(str(events), PlantedModel(seed=8), RECORDS, fmt="json")
    config = tmp_path / "streamrec.yaml"
    config.write_text(yaml.safe_dump({**SMALL_UP, "up": {**SMALL_UP["up"], "shards": 1, "replay": {"rate": RATE}}}))
    run_dir = tmp_path / "run"

    def start() -> Up:
        (port,) = free_ports(1)
        ups.append(Up(run_dir, config, port, extra=["--replay", str(events)]))
        return ups[-1]

    first = start()
    first.wait_for("some passes committed", lambda: newest_pass(run_dir)["records_total"] >= 600)
    assert first.ctrl_c() == 0, first.output()
    stopped = newest_pass(run_dir)
    done = stopped["records_total"]
    assert 0 < done < RECORDS, "the first run was to stop partway"
    assert sum(stopped["offsets"].values()) == done

    second = start()
    second.wait_for("every line trained", lambda: newest_pass(run_dir)["records_total"] >= RECORDS)
    assert f"the replay resumes after the {done} lines the last pass trained" in second.output()
    # The replay writes its summary after its last flush, which may come after the trainers
    # committed the lines it sent: wait for the line, then check its count.
    replay_log = run_dir / "logs" / "replay.log"
    second.wait_for("the replay's summary", lambda: "produced " in replay_log.read_text().split("restart 0)")[-1])
    assert f"produced {RECORDS - done} records" in replay_log.read_text()  # the second replay sent only the rest
    second.wait_for("the job's total counts both workers",
                    lambda: second.job()["records_total"] == RECORDS)
    assert second.ctrl_c() == 0, second.output()
    last = newest_pass(run_dir)
    assert last["records_total"] == RECORDS  # none twice, none left out
    assert sum(last["offsets"].values()) == RECORDS and sorted(last["offsets"]) == ["0", "1"]
