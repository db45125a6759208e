"""Fixtures every test folder shares: one real tansu broker per test session (stopped even when
tests fail), fresh topics on it, and a reader of a topic.

It also keeps ``make test-fast`` (``-m "not process and not slow"``) honest: a test on the
session broker is marked ``process`` here, and in that run a test that starts any other process
(shards, uvicorn, a subprocess) without the mark fails, naming itself, instead of slowing it."""

from __future__ import annotations

import multiprocessing.process
import re
import subprocess
import uuid
from collections.abc import Callable, Generator, Iterator
from typing import Any

import pytest

from streaming.broker import EmbeddedBroker
from streaming.connection import client_options
from streaming.kafka_config import KafkaConfig
from streaming.topics import ensure_topics

PROCESS_MARK = "process"
# Every way a test here starts a process: subprocess (asyncio's too) and multiprocessing.
_SPAWNS: tuple[tuple[type, str], ...] = ((subprocess.Popen, "_execute_child"),
                                         (multiprocessing.process.BaseProcess, "start"))


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # A test on the session broker is a process test even when another test started the broker.
    for item in items:
        if "broker" in getattr(item, "fixturenames", ()) and item.get_closest_marker(PROCESS_MARK) is None:
            item.add_marker(PROCESS_MARK)


def _fails_unmarked_spawns(item: pytest.Item) -> Generator[None, None, None]:
    """One phase of a test in the fast run: a spawn by a test not marked ``process`` fails it once
    the phase is over (the spawn itself goes ahead, so a test waiting on its child cannot hang)."""
    fast_run = re.search(rf"\bnot\s+{PROCESS_MARK}\b", item.config.getoption("markexpr") or "")
    if not fast_run or item.get_closest_marker(PROCESS_MARK) is not None:
        return (yield)
    spawned: list[str] = []

    def noting(what: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            spawned.append(what)
            return original(*args, **kwargs)

        return call

    originals = [(cls, name, getattr(cls, name)) for cls, name in _SPAWNS]
    for cls, name, original in originals:
        setattr(cls, name, noting(f"{cls.__name__}.{name}", original))
    try:
        return (yield)
    finally:
        for cls, name, original in originals:
            setattr(cls, name, original)
        if spawned:
            pytest.fail(f"{item.nodeid} starts a process ({spawned[0]}) but is not marked {PROCESS_MARK}: add "
                        f"pytestmark = pytest.mark.{PROCESS_MARK} to its module or @pytest.mark.{PROCESS_MARK} to it",
                        pytrace=False)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    return (yield from _fails_unmarked_spawns(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    return (yield from _fails_unmarked_spawns(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, None, None]:
    return (yield from _fails_unmarked_spawns(item))


@pytest.fixture(scope="session")
def broker() -> Iterator[EmbeddedBroker]:
    # The context manager kills the broker's process group on teardown, pass or fail.
    with EmbeddedBroker() as b:
        yield b


@pytest.fixture
def kafka_config(broker: EmbeddedBroker) -> Callable[..., KafkaConfig]:
    """Fresh topics per call, created on the session broker; short rebalance timeouts."""

    def make(**overrides: Any) -> KafkaConfig:
        name = f"t-{uuid.uuid4().hex[:10]}"
        fields: dict[str, Any] = {
            "topic": name,
            "dead_letter_topic": f"{name}.dead",
            "group_id": f"g-{name}",
            "partitions": 4,
            "batch_size": 2048,
            "batch_timeout_ms": 100,
            "max_poll_interval_ms": 3000,
            "session_timeout_ms": 3000,
        }
        fields.update(overrides)
        config = KafkaConfig(**fields)
        ensure_topics(config, client_options(config, [broker.bootstrap]))
        return config

    return make


@pytest.fixture
def read_topic(broker: EmbeddedBroker) -> Callable[..., list[Any]]:
    """Read ``n`` records of a topic from the beginning (all partitions); stops after ``timeout_s``."""
    import time

    from kafka import KafkaConsumer, TopicPartition

    def read(topic: str, n: int, *, timeout_s: float = 30.0) -> list[Any]:
        consumer = KafkaConsumer(bootstrap_servers=[broker.bootstrap], enable_auto_commit=False)
        try:
            parts = consumer.partitions_for_topic(topic) or {0}
            tps = [TopicPartition(topic, p) for p in sorted(parts)]
            consumer.assign(tps)
            consumer.seek_to_beginning(*tps)
            out: list[Any] = []
            deadline = time.monotonic() + timeout_s
            while len(out) < n and time.monotonic() < deadline:
                for recs in consumer.poll(timeout_ms=200).values():
                    out.extend(recs)
            return out
        finally:
            consumer.close()

    return read
