"""Records stamped far in the future (a producer's clock ahead, or forged) are counted and
taken as received now: the receipt time a batch carries, which every freshness figure keeps a
running maximum of, never lies past now plus the allowed skew. The records are trained as any."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from kafka import KafkaProducer

from logrecords.schema_config import SchemaConfig, SlotConfig, SlotKind
from streaming.broker import EmbeddedBroker
from streaming.consumer import FUTURE_SKEW_S, StreamConsumer
from streaming.kafka_config import KafkaConfig

pytestmark = pytest.mark.process

SCHEMA = SchemaConfig(format="json", slots=(SlotConfig(name="n", kind=SlotKind.SPARSE),))
YEAR_2100_MS = 4_102_444_800_000


def _drain(consumer: StreamConsumer, n: int) -> list:
    batches: list = []
    deadline = time.monotonic() + 60
    while sum(map(len, batches)) < n and time.monotonic() < deadline:
        batch = consumer.poll_batch()
        if batch is not None:
            batches.append(batch)
            consumer.tracker.mark_pushed(batch)
    return batches


def test_far_future_stamps_are_counted_and_taken_as_now(
        broker: EmbeddedBroker, kafka_config: Callable[..., KafkaConfig]) -> None:
    config = kafka_config(partitions=1)
    producer = KafkaProducer(bootstrap_servers=[broker.bootstrap])
    try:
        for i in range(5):
            producer.send(config.topic, value=b'{"label": 1, "n": %d}' % i, partition=0)
        for i in range(20):
            producer.send(config.topic, value=b'{"label": 0, "n": %d}' % i, partition=0, timestamp_ms=YEAR_2100_MS)
        producer.flush()
        with StreamConsumer(config, SCHEMA, [broker.bootstrap]) as consumer:
            first = _drain(consumer, 25)
            read_by = time.time()
            assert sum(map(len, first)) == 25  # trained as any record
            assert consumer.future_records == 20 and consumer.metrics()["future_records"] == 20
            assert max(b.received_at for b in first) <= read_by + FUTURE_SKEW_S
            for i in range(5):
                producer.send(config.topic, value=b'{"label": 1, "n": %d}' % i, partition=0)
            producer.flush()
            sent_by = time.time() + 1.0  # the broker's clock is this machine's; ms rounding
            later = _drain(consumer, 5)
            assert sum(map(len, later)) == 5 and all(b.received_at <= sent_by for b in later)
            assert consumer.future_records == 20
    finally:
        producer.close()
