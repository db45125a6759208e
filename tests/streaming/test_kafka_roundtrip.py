"""Produce through the real embedded broker, consume with a two-member group: every record exactly once."""

from __future__ import annotations

import threading
import time
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
from streaming.consumer import Membership, StreamConsumer
from streaming.kafka_config import KafkaConfig
from streaming.producer import RecordProducer

pytestmark = pytest.mark.process

N = 100_000


def test_two_consumers_in_one_group_read_every_record_exactly_once(
    broker: EmbeddedBroker, kafka_config: Callable[..., KafkaConfig]
) -> None:
    config = kafka_config(batch_size=4096)
    cols = PlantedModel(seed=7).sample(N)
    lines = criteo_lines(cols)
    # I1 holds the record number, so each parsed record names its source line.
    lines = [b"\t".join([ln.split(b"\t", 2)[0], str(i).encode(), ln.split(b"\t", 2)[2]]) for i, ln in enumerate(lines)]
    bootstrap = [broker.bootstrap]
    results: dict[str, list[Batch]] = {"a": [], "b": []}
    assigned: dict[str, list[int]] = {}
    done = threading.Event()

    def run(name: str) -> None:
        with StreamConsumer(
            config, SchemaConfig.criteo(), bootstrap, membership=Membership.GROUP, client_id=f"trainer-{name}"
        ) as consumer:
            while not done.is_set():
                batch = consumer.poll_batch()
                assigned[name] = consumer.assigned()
                if batch is not None:
                    results[name].append(batch)
                    consumer.tracker.mark_pushed(batch)
                if sum(len(b) for bs in list(results.values()) for b in bs) >= N:
                    done.set()

    threads = [threading.Thread(target=run, args=(n,)) for n in results]
    for t in threads:
        t.start()
    try:
        # Produce once both members own partitions, so the group really splits the work.
        deadline = time.monotonic() + 60
        def split() -> bool:
            owned = [p for ps in list(assigned.values()) for p in ps]
            return len(assigned) == 2 and all(assigned.values()) and sorted(owned) == [0, 1, 2, 3]

        while time.monotonic() < deadline and not split():
            time.sleep(0.1)
        assert split(), assigned
        with RecordProducer(config, client_options(config, bootstrap)) as producer:
            assert producer.send_all(lines) == N
        done.wait(timeout=120)
    finally:
        done.set()
        for t in threads:
            t.join(timeout=60)

    everything = concat_batches([b for bs in results.values() for b in bs])
    record_no = everything.dense[:, 0].astype(np.int64)
    assert len(everything) == N
    assert np.array_equal(np.sort(record_no), np.arange(N))  # exactly once
    assert all(results.values()), "both group members received records"

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
