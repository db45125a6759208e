"""A micro-batch does not wait for more records once the consumer has read its log to the end
(freshness, #14), while a backlog still fills whole batches: ``StreamConsumer.caught_up``."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from logrecords.schema_config import SchemaConfig, SlotConfig, SlotKind
from streaming.broker import EmbeddedBroker
from streaming.connection import client_options
from streaming.consumer import StreamConsumer
from streaming.kafka_config import KafkaConfig
from streaming.producer import RecordProducer

pytestmark = pytest.mark.process

SCHEMA = SchemaConfig(format="json", slots=(SlotConfig(name="tags", kind=SlotKind.SPARSE),))


def records(n: int) -> list[bytes]:
    return [b'{"label": %d, "tags": "t%d"}' % (i % 2, i) for i in range(n)]


def test_a_short_batch_goes_once_the_log_is_read_and_a_backlog_gives_full_batches(
        broker: EmbeddedBroker, kafka_config: Callable[..., KafkaConfig]) -> None:
    # A batch timeout of 10 minutes: a batch that is not full can only close at the log's end.
    config = kafka_config(partitions=2, batch_size=100, batch_timeout_ms=600_000)
    bootstrap = [broker.bootstrap]
    with RecordProducer(config, client_options(config, bootstrap)) as producer:
        producer.send_all(records(350))
        with StreamConsumer(config, SCHEMA, bootstrap) as consumer:
            sizes, flags = [], []
            while sum(sizes) < 350:
                batch = consumer.poll_batch()
                assert batch is not None
                sizes.append(len(batch))
                flags.append(consumer.caught_up)
            assert sizes[:3] == [100, 100, 100] and flags[:2] == [False, False]  # the backlog: full batches
            assert sum(sizes) == 350 and flags[-1] and sizes[-1] < 100  # its end: a short batch, at once
            producer.send_all(records(7))
            got = 0
            while got < 7:  # the new records, without waiting for 100 or the timeout
                batch = consumer.poll_batch()
                assert batch is not None
                got += len(batch)
            assert got == 7 and consumer.caught_up
