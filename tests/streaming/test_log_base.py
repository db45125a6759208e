"""``kafka.log_base``: a log that starts after records of its stream already trained (a replay
resumed on a new broker). Offsets handed in and out count from the stream's start; the
group's committed offsets stay offsets of this log."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from kafka import KafkaAdminClient

from logrecords.schema_config import SchemaConfig, SlotConfig, SlotKind
from streaming.broker import EmbeddedBroker
from streaming.connection import client_options
from streaming.consumer import StreamConsumer
from streaming.group_offsets import GroupOffsets
from streaming.kafka_config import KafkaConfig
from streaming.producer import RecordProducer

pytestmark = pytest.mark.process

SCHEMA = SchemaConfig(format="json", slots=(SlotConfig(name="n", kind=SlotKind.SPARSE),))


def _read(consumer: StreamConsumer, n: int) -> list[int]:
    """Offsets (of this log) of the next ``n`` records, each batch marked pushed."""
    got: list[int] = []
    deadline = time.monotonic() + 60
    while len(got) < n and time.monotonic() < deadline:
        batch = consumer.poll_batch()
        if batch is not None:
            got.extend(o for lo, hi in batch.positions.values() for o in range(lo, hi + 1))
            consumer.tracker.mark_pushed(batch)
    return got


def test_offsets_count_the_stream_and_the_group_gets_this_logs(
        broker: EmbeddedBroker, kafka_config: Callable[..., KafkaConfig]) -> None:
    made = kafka_config(partitions=2)
    bootstrap = [broker.bootstrap]
    with RecordProducer(made, client_options(made, bootstrap)) as producer:  # stream records 100.. and 40..
        producer.send_all((b'{"label": 1, "n": %d}' % i for i in range(20)), partitions=(i % 2 for i in range(20)))
    config = made.model_copy(update={"log_base": {0: 100, 1: 40}})
    with StreamConsumer(config, SCHEMA, bootstrap) as consumer:
        # partition 0 resumes at stream record 104 (this log's offset 4); partition 1 from a point before
        # this log began: everything it holds is read
        consumer.seek_to({0: 104, 1: 30})
        assert sorted(_read(consumer, 16)) == sorted([*range(4, 10), *range(10)])
        assert consumer.committable() == {0: 110, 1: 50}
    group = GroupOffsets(config, bootstrap)
    try:
        group.commit({0: 110, 1: 50})
    finally:
        group.close()
    admin = KafkaAdminClient(**client_options(config, bootstrap))
    try:
        got = admin.list_group_offsets(config.group_id)[config.group_id]
    finally:
        admin.close()
    assert {tp.partition: om.offset for tp, om in got.items() if tp.topic == config.topic} == {0: 10, 1: 10}
