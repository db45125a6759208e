"""`streamrec up --kafka BOOTSTRAP --replay FILE`: no embedded broker (the test runs its own),
the file replayed into the cluster's topic instead of the generator; every record of it is
trained and committed, the service serves a bundle, and Ctrl-C stops every role but leaves
the external broker running."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from launcher.launch import free_ports
from logrecords.generator import PlantedModel
from logrecords.sample_encoding import write_dataset
from streaming.broker import broker_answers
from trainer import checkpoints

from .test_up_e2e import Up, run_processes

pytestmark = pytest.mark.process

RECORDS = 1500


@pytest.fixture
def up_started(tmp_path: Path) -> Iterator[list[Up]]:
    started: list[Up] = []
    yield started
    for up in started:
        up.kill()


def test_up_trains_a_replayed_file_on_an_external_broker(broker, up_started: list[Up], tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    write_dataset(str(events), PlantedModel(seed=4), RECORDS, fmt="json")
    topic = f"up-replay-{time.monotonic_ns()}"
    config = tmp_path / "streamrec.yaml"
    config.write_text(yaml.safe_dump({
        "kafka": {"topic": topic, "dead_letter_topic": f"{topic}.dead", "partitions": 2, "batch_size": 256,
                  "batch_timeout_ms": 100},
        "train": {"passes": {"seconds": 2, "records": None}},
        "service": {"poll_seconds": 0.3},
        "up": {"shards": 1, "workers": 1},  # the replay: as fast as the trainer takes it (up.replay)
    }))
    run_dir = tmp_path / "run"
    (port,) = free_ports(1)
    up = Up(run_dir, config, port, extra=["--kafka", broker.bootstrap, "--replay", str(events)])
    up_started.append(up)

    root = run_dir / "checkpoints"

    def trained() -> int:
        done = checkpoints.complete_passes(root) if root.is_dir() else []
        return int(checkpoints.read_pass(root, done[-1])["records_total"]) if done else 0

    up.wait_for(f"all {RECORDS} replayed records committed", lambda: trained() == RECORDS)
    up.wait_for("a bundle served", lambda: up.get("/readyz")["version"] >= 1)
    logs = {p.name for p in (run_dir / "logs").glob("*.log")}
    assert "replay.log" in logs and "generator.log" not in logs
    assert "broker.log" not in logs, "--kafka must not start the embedded broker"
    assert (run_dir / "streamrec.yaml").read_text().count(broker.bootstrap) >= 1

    assert up.ctrl_c() == 0, up.output()
    assert run_processes(run_dir) == [], "Ctrl-C left processes behind"
    assert broker_answers(broker.bootstrap), "up stopped a broker it did not start"
    assert trained() == RECORDS  # the final pass added nothing: the file was trained once
