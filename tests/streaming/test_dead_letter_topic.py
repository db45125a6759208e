"""Every kind of bad record lands in the dead-letter topic with its reason; ingestion goes on."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from logrecords.generator import PlantedModel
from logrecords.sample_encoding import criteo_lines
from logrecords.schema_config import SchemaConfig, SlotConfig, SlotKind
from streaming.broker import EmbeddedBroker
from streaming.connection import client_options
from streaming.consumer import StreamConsumer
from streaming.kafka_config import KafkaConfig
from streaming.producer import RecordProducer

pytestmark = pytest.mark.process


def _consume_all(consumer: StreamConsumer, n_good: int, n_bad: int) -> list[Any]:
    batches = []
    for _ in range(200):
        batch = consumer.poll_batch()
        if batch is not None:
            batches.append(batch)
            consumer.tracker.mark_pushed(batch)
        if sum(map(len, batches)) >= n_good and sum(consumer.reject_counts.values()) >= n_bad:
            break
    return batches


def test_criteo_bad_records_are_dead_lettered_with_reason_and_bytes(
    broker: EmbeddedBroker, kafka_config: Callable[..., KafkaConfig], read_topic: Callable[..., list[Any]]
) -> None:
    config = kafka_config(partitions=1, max_message_bytes=1024)
    good = criteo_lines(PlantedModel(seed=3).sample(300))
    fields = good[0].split(b"\t")
    bad = {
        "field_count": b"\t".join(fields[:20]),
        "bad_dense": b"\t".join([fields[0], b"12x", *fields[2:]]),
        "bad_hex": b"\t".join([*fields[:20], b"zz0011gg", *fields[21:]]),
        "bad_label": b"\t".join([b"7", *fields[1:]]),
        "oversized": b"\t".join([*fields[:-1], b"a" * 2000]),
    }
    # Bad records spread through the stream: ingestion must go on after each.
    stream = [
        *good[:100], bad["field_count"], bad["bad_dense"], *good[100:200],
        bad["bad_hex"], bad["bad_label"], bad["bad_hex"], bad["oversized"], *good[200:],
    ]
    bootstrap = [broker.bootstrap]
    with RecordProducer(config, client_options(config, bootstrap)) as producer:
        producer.send_all(stream)

    with StreamConsumer(config, SchemaConfig.criteo(), bootstrap) as consumer:
        batches = _consume_all(consumer, len(good), 6)
        counts = consumer.reject_counts
        committable = consumer.committable()

    assert sum(map(len, batches)) == len(good)
    assert counts == {"field_count": 1, "bad_dense": 1, "bad_hex": 2, "bad_label": 1, "oversized": 1}
    assert committable == {0: len(stream)}  # rejected records are not a reason to re-read

    letters = read_topic(config.dead_letter_topic, 6)
    assert len(letters) == 6
    by_reason = Counter()
    for rec in letters:
        headers = dict(rec.headers)
        reason = headers["reason"].decode()
        by_reason[reason] += 1
        assert rec.value == bad[reason]  # the original bytes
        assert headers["detail"]
        topic, part, offset = headers["source"].decode().split("/")
        assert (topic, int(part)) == (config.topic, 0)
        assert stream[int(offset)] == rec.value
    assert by_reason == Counter(counts)
    detail = {dict(r.headers)["reason"].decode(): dict(r.headers)["detail"].decode() for r in letters}
    assert "I1" in detail["bad_dense"] and "12x" in detail["bad_dense"]
    assert "C7" in detail["bad_hex"]


def test_json_bad_records_are_dead_lettered(
    broker: EmbeddedBroker, kafka_config: Callable[..., KafkaConfig], read_topic: Callable[..., list[Any]]
) -> None:
    config = kafka_config(partitions=1, max_message_bytes=200)
    schema = SchemaConfig(
        format="json",
        slots=(SlotConfig(name="age", kind=SlotKind.DENSE), SlotConfig(name="tags", kind=SlotKind.SPARSE)),
    )
    stream = [
        b'{"label": 1, "age": 30, "tags": ["a", "b"]}',
        b'{"label": 0, "age": 3',
        b'{"label": 1, "age": "old", "tags": "x"}',
        b'["not", "an", "object"]',
        b'{"label": 0, "tags": [' + b'"t",' * 100 + b'"t"]}',
        b'{"label": 0, "age": 1.5, "tags": []}',
    ]
    bootstrap = [broker.bootstrap]
    with RecordProducer(config, client_options(config, bootstrap)) as producer:
        producer.send_all(stream)
    with StreamConsumer(config, schema, bootstrap) as consumer:
        batches = _consume_all(consumer, 2, 4)
        counts = consumer.reject_counts
    assert [b.labels.tolist() for b in batches] == [[1.0, 0.0]]
    assert batches[0].dense[:, 0].tolist() == [30.0, 1.5]
    assert counts == {"invalid_json": 1, "bad_dense": 1, "schema": 1, "oversized": 1}
    letters = read_topic(config.dead_letter_topic, 4)
    assert sorted(r.value for r in letters) == sorted([stream[1], stream[2], stream[3], stream[4]])


def test_huge_message_is_dead_lettered_truncated_and_ingestion_goes_on(
    broker: EmbeddedBroker, kafka_config: Callable[..., KafkaConfig], read_topic: Callable[..., list[Any]]
) -> None:
    from kafka import KafkaProducer

    config = kafka_config(partitions=1, max_message_bytes=1024)
    good = criteo_lines(PlantedModel(seed=4).sample(10))
    huge = b"1\t" + b"9" * (2 << 20)
    producer = KafkaProducer(bootstrap_servers=[broker.bootstrap], max_request_size=8 << 20)
    for value in [*good[:5], huge, *good[5:]]:
        producer.send(config.topic, value=value)
    producer.flush()
    producer.close()
    with StreamConsumer(config, SchemaConfig.criteo(), [broker.bootstrap]) as consumer:
        batches = _consume_all(consumer, 10, 1)
        assert consumer.reject_counts == {"oversized": 1}
        assert consumer.dead_letters.failed_sends == 0
    assert sum(map(len, batches)) == 10
    (letter,) = read_topic(config.dead_letter_topic, 1)
    headers = dict(letter.headers)
    assert headers["reason"] == b"oversized" and int(headers["truncated_from"]) == len(huge)
    assert huge.startswith(letter.value) and len(letter.value) == 512 * 1024


def test_a_batch_is_the_parse_of_its_records_and_names_each_reject_by_its_offset(
    broker: EmbeddedBroker, kafka_config: Callable[..., KafkaConfig], read_topic: Callable[..., list[Any]]
) -> None:
    # rejects spread over a batch of ~2000 records: each dead letter must name its own offset
    config = kafka_config(partitions=1, batch_size=2048, batch_timeout_ms=1000)
    good = criteo_lines(PlantedModel(seed=5).sample(2000))
    bad = b"7\t" + good[0].split(b"\t", 1)[1]  # a bad label
    stream = [*good[:300], bad, *good[300:900], bad, *good[900:1700], bad, *good[1700:]]
    bootstrap = [broker.bootstrap]
    with RecordProducer(config, client_options(config, bootstrap)) as producer:
        producer.send_all(stream)
    with StreamConsumer(config, SchemaConfig.criteo(), bootstrap) as consumer:
        batches = _consume_all(consumer, len(good), 3)
        assert consumer.reject_counts == {"bad_label": 3}
        whole, _ = consumer.parser.parse(good)
    assert sum(map(len, batches)) == len(good)
    assert batches[0].positions[0][0] == 0 and batches[-1].positions[0][1] == len(stream) - 1
    labels = np.concatenate([b.labels for b in batches])
    np.testing.assert_array_equal(labels, whole.labels)
    np.testing.assert_array_equal(np.concatenate([b.dense for b in batches]), whole.dense)
    for name, (values, offsets) in whole.slots.items():
        np.testing.assert_array_equal(np.concatenate([b.slots[name][0] for b in batches]), values)
        lengths = np.concatenate([np.diff(b.slots[name][1]) for b in batches])
        np.testing.assert_array_equal(lengths, np.diff(offsets))
    sources = sorted(int(dict(r.headers)["source"].decode().rsplit("/", 1)[1]) for r in read_topic(
        config.dead_letter_topic, 3))
    assert sources == [300, 901, 1702]  # each reject named by its own offset
