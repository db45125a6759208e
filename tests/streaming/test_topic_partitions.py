"""A consumer reads the partitions the topic has, not the number the config creates it with:
a 6-partition topic read under ``partitions: 4`` gives every record once, split between two
trainers by ``p % 2``, and the lag covers every partition."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from logrecords.schema_config import SchemaConfig, SlotConfig, SlotKind
from streaming.broker import EmbeddedBroker
from streaming.connection import client_options
from streaming.consumer import StreamConsumer
from streaming.kafka_config import KafkaConfig
from streaming.producer import RecordProducer

pytestmark = pytest.mark.process

SCHEMA = SchemaConfig(format="json", slots=(SlotConfig(name="n", kind=SlotKind.SPARSE),))
RECORDS = 6001


def test_every_partition_of_the_topic_is_read_whatever_the_config_says(
        broker: EmbeddedBroker, kafka_config: Callable[..., KafkaConfig]) -> None:
    made = kafka_config(partitions=6)  # the topic as someone else created it
    config = made.model_copy(update={"partitions": 4})  # what the trainers' config says
    bootstrap = [broker.bootstrap]
    with RecordProducer(made, client_options(made, bootstrap)) as producer:
        producer.send_all((b'{"label": 1, "n": %d}' % i for i in range(RECORDS)),
                          partitions=(i % 6 for i in range(RECORDS)))
    seen: list[tuple[int, int]] = []
    consumers = [StreamConsumer(config, SCHEMA, bootstrap,
                                select=lambda p, r=r: p % 2 == r, client_id=f"c{r}") for r in range(2)]
    try:
        assert [c.assigned() for c in consumers] == [[0, 2, 4], [1, 3, 5]]
        deadline = time.monotonic() + 120
        while len(seen) < RECORDS and time.monotonic() < deadline:
            for c in consumers:
                batch = c.poll_batch()
                if batch is not None:
                    seen.extend((p, o) for p, (lo, hi) in batch.positions.items() for o in range(lo, hi + 1))
                    c.tracker.mark_pushed(batch)
        assert len(seen) == RECORDS and len(set(seen)) == RECORDS  # every record, none twice
        assert {p for p, _ in seen} == set(range(6))
        ends = {p: (RECORDS - p + 5) // 6 for p in range(6)}
        assert {p: o for c in consumers for p, o in c.committable().items()} == ends
        assert {p for c in consumers for p in c.lag()} == set(range(6))
        assert sum(sum(c.lag().values()) for c in consumers) == 0
    finally:
        for c in consumers:
            c.close()
