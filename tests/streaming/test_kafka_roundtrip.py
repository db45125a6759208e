"""Produce through the real embedded broker, consume with two trainers that split the partitions: every record
exactly once."""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np
import pytest

from logrecords.batch import Batch, concat_batches
from logrecords.criteo import CriteoParser
from logrecords.generator import PlantedModel
from logrecords.sample_encoding import criteo_lines
from logrecords.schema_config import SchemaConfig
from streaming.broker import EmbeddedBroker
from streaming.connection import client_options
from streaming.consumer import StreamConsumer
from streaming.kafka_config import KafkaConfig
from streaming.producer import RecordProducer

pytestmark = pytest.mark.process

N = 100_000


def test_two_consumers_on_their_own_partitions_read_every_record_exactly_once(
    broker: EmbeddedBroker, kafka_config: Callable[..., KafkaConfig]
) -> None:
    config = kafka_config(batch_size=4096)
    cols = PlantedModel(seed=7).sample(N)
    lines = criteo_lines(cols)
    # I1 holds the record number, so each parsed record names its source line.
    lines = [b"\t".join([ln.split(b"\t", 2)[0], str(i).encode(), ln.split(b"\t", 2)[2]]) for i, ln in enumerate(lines)]
    bootstrap = [broker.bootstrap]
    with RecordProducer(config, client_options(config, bootstrap)) as producer:
        assert producer.send_all(lines) == N
    results: dict[int, list[Batch]] = {0: [], 1: []}
    assigned: dict[int, list[int]] = {}
    done = threading.Event()

    def run(rank: int) -> None:
        with StreamConsumer(config, SchemaConfig.criteo(), bootstrap, select=lambda p: p % 2 == rank,
                            client_id=f"trainer-{rank}") as consumer:
            assigned[rank] = consumer.assigned()
            while not done.is_set():
                batch = consumer.poll_batch()
                if batch is not None:
                    results[rank].append(batch)
                    consumer.tracker.mark_pushed(batch)
                if sum(len(b) for bs in list(results.values()) for b in bs) >= N:
                    done.set()

    threads = [threading.Thread(target=run, args=(rank,)) for rank in results]
    for t in threads:
        t.start()
    try:
        done.wait(timeout=120)
    finally:
        done.set()
        for t in threads:
            t.join(timeout=60)

    assert assigned == {0: [0, 2], 1: [1, 3]}
    everything = concat_batches([b for bs in results.values() for b in bs])
    record_no = everything.dense[:, 0].astype(np.int64)
    assert len(everything) == N
    assert np.array_equal(np.sort(record_no), np.arange(N))  # exactly once
    assert all(results.values()), "both trainers received records"

    expected, rejected = CriteoParser().parse(lines)
    assert not rejected
    order = np.argsort(record_no)
    got = everything.take(order)
    np.testing.assert_array_equal(got.labels, expected.labels)
    np.testing.assert_array_equal(got.dense, expected.dense)
    for name, (values, offsets) in expected.slots.items():
        np.testing.assert_array_equal(got.slots[name][0], values)
        np.testing.assert_array_equal(got.slots[name][1], offsets)


def test_topics_are_created_when_missing_with_their_partitions(broker: EmbeddedBroker) -> None:
    from kafka import KafkaConsumer

    from streaming.topics import ensure_topics

    config = KafkaConfig(topic="admin-events", dead_letter_topic="admin-events.dead", partitions=3)
    options = client_options(config, [broker.bootstrap])
    assert sorted(ensure_topics(config, options)) == ["admin-events", "admin-events.dead"]
    assert ensure_topics(config, options) == []  # already there: nothing to do
    consumer = KafkaConsumer(bootstrap_servers=[broker.bootstrap])
    try:
        assert consumer.partitions_for_topic("admin-events") == {0, 1, 2}
        assert consumer.partitions_for_topic("admin-events.dead") == {0}
    finally:
        consumer.close()
