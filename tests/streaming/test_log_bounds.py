"""Restored offsets past the end of the log (a recreated topic) are found, with tansu's short
list-offsets answer confirmed by a fetch; a consumer restoring them starts the new log over."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from logrecords.schema_config import SchemaConfig
from streaming.broker import EmbeddedBroker
from streaming.connection import client_options
from streaming.consumer import StreamConsumer
from streaming.kafka_config import KafkaConfig
from streaming.log_bounds import past_the_end
from streaming.producer import RecordProducer

pytestmark = pytest.mark.process


def _fill(config: KafkaConfig, bootstrap: list[str], n: int, batches: int) -> None:
    lines = [b"1" + b"\t" * 14 + b"\t".join(b"%08x" % (i + j) for j in range(26)) for i in range(n)]
    with RecordProducer(config, client_options(config, bootstrap)) as producer:
        for k in range(batches):  # several produce batches: tansu's "latest" answer lags the last one
            producer.send_all(lines[k * n // batches:(k + 1) * n // batches])


def test_offsets_within_the_log_are_kept_and_past_it_are_found(
    broker: EmbeddedBroker, kafka_config: Callable[..., KafkaConfig]
) -> None:
    config = kafka_config(partitions=1)
    bootstrap = [broker.bootstrap]
    _fill(config, bootstrap, 300, batches=3)
    options = client_options(config, bootstrap)
    assert past_the_end(options, config.topic, {0: 0}) == set()
    assert past_the_end(options, config.topic, {0: 299}) == set()  # inside the last batch
    assert past_the_end(options, config.topic, {0: 300}) == set()  # the end itself: resume there
    assert past_the_end(options, config.topic, {0: 301}) == {0}
    assert past_the_end(options, config.topic, {0: 100_000}) == {0}


def test_a_consumer_restoring_past_an_empty_log_reads_the_new_one(
    broker: EmbeddedBroker, kafka_config: Callable[..., KafkaConfig]
) -> None:
    config = kafka_config(partitions=1, batch_size=100)
    bootstrap = [broker.bootstrap]
    with StreamConsumer(config, SchemaConfig.criteo(), bootstrap) as consumer:
        consumer.seek_to({0: 5000})  # a checkpoint of the topic's previous life
        _fill(config, bootstrap, 50, batches=1)
        seen = 0
        for _ in range(100):
            batch = consumer.poll_batch()
            seen += 0 if batch is None else len(batch)
            if seen >= 50:
                break
    assert seen == 50
