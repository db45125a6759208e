"""Freshness counts from receipt: a batch carries the newest Kafka timestamp of its records
(when the system got them), not only their own event times, which a replayed log has old."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import pytest

from logrecords.batch import concat_batches
from logrecords.schema_config import SchemaConfig, SlotConfig, SlotKind
from streaming.broker import EmbeddedBroker
from streaming.connection import client_options
from streaming.consumer import StreamConsumer
from streaming.kafka_config import KafkaConfig
from streaming.producer import RecordProducer

pytestmark = pytest.mark.process

SCHEMA = SchemaConfig(format="json", slots=(SlotConfig(name="tags", kind=SlotKind.SPARSE),), event_time="ts")
OLD = [b'{"label": 1, "tags": "a", "ts": 978300014}', b'{"label": 0, "tags": "b", "ts": 978300015}']


def test_a_replayed_old_record_is_received_now(broker: EmbeddedBroker,
                                               kafka_config: Callable[..., KafkaConfig]) -> None:
    config = kafka_config(partitions=2)
    bootstrap = [broker.bootstrap]
    sent_after = time.time() - 1.0  # the broker's clock is this machine's; ms rounding
    with RecordProducer(config, client_options(config, bootstrap)) as producer:
        producer.send_all(OLD * 3)
    batches = []
    with StreamConsumer(config, SCHEMA, bootstrap) as consumer:
        for _ in range(200):
            batch = consumer.poll_batch()
            if batch is not None:
                batches.append(batch)
            if sum(map(len, batches)) >= 6:
                break
    polled_by = time.time() + 1.0
    assert sum(map(len, batches)) == 6
    for b in batches:
        assert b.event_time is not None and float(np.max(b.event_time)) < 1e9  # the log's own time, 2001
        assert b.received_at is not None and sent_after <= b.received_at <= polled_by
    joined = concat_batches(batches)
    assert joined.received_at == max(b.received_at for b in batches)
    assert joined.take(np.array([0])).received_at == joined.received_at
