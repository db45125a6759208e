"""Small `streamrec up` runs (``start_up``) for the tests of its signals and its supervision."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from launcher.launch import free_ports

from .test_up_e2e import Up

SMALL_UP = {  # small and quick: what these tests check does not need a model that learns
    "kafka": {"partitions": 2, "batch_size": 128, "batch_timeout_ms": 100},
    "train": {"passes": {"seconds": 1, "records": None}, "metric_window": 500},
    "service": {"poll_seconds": 0.5},
    "up": {"shards": 2, "workers": 2, "generator": {"rate": 100}, "rank_lease_ttl_s": 2, "commit_on_exit": False,
           "restart": {"backoff_s": 0.2}},  # the back-off itself: test_up_roles
}


@pytest.fixture
def start_up(tmp_path: Path) -> Iterator[Callable[..., Up]]:
    config = tmp_path / "streamrec.yaml"
    config.write_text(yaml.safe_dump(SMALL_UP))
    started: list[Up] = []

    def start(**kwargs: bool) -> Up:
        (port,) = free_ports(1)
        started.append(Up(tmp_path / "run", config, port, **kwargs))
        return started[-1]

    yield start
    for up in started:
        up.kill()
