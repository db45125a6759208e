"""Fixtures every test folder shares: one real tansu broker per test session (stopped even when
tests fail), fresh topics on it, and a reader of a topic."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from streaming.broker import EmbeddedBroker
from streaming.connection import client_options
from streaming.kafka_config import KafkaConfig
from streaming.topics import ensure_topics


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
