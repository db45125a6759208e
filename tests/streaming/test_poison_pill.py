"""Poison pills: a record that once crashed the parser (deep nesting, a time of 1e400, a parser
bug) is rejected alone with its reason; the records around it and the partition's offsets move on."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest

from logrecords.batch import Batch
from logrecords.isolated_parse import parse_isolating
from logrecords.json_lines import JsonLinesParser
from logrecords.rejects import Rejected, RejectReason
from logrecords.schema_config import SchemaConfig, SlotConfig, SlotKind
from streaming.broker import EmbeddedBroker
from streaming.connection import client_options
from streaming.consumer import StreamConsumer
from streaming.kafka_config import KafkaConfig
from streaming.producer import RecordProducer

SCHEMA = SchemaConfig(
    format="json",
    slots=(SlotConfig(name="age", kind=SlotKind.DENSE), SlotConfig(name="tags", kind=SlotKind.SPARSE)),
    event_time="ts",
)
GOOD = [b'{"label": 1, "age": 30, "tags": ["a", "b"], "ts": 1700000000}',
        b'{"label": 0, "age": 2, "tags": "c", "ts": 1700000001.5}']
DEEP_ARRAY = b'{"label": 1, "tags": ' + b"[" * 3000 + b"]" * 3000 + b"}"
DEEP_OBJECT = b'{"label": 1, "age": ' + b'{"a": ' * 3000 + b"1" + b"}" * 3001


def test_deeply_nested_json_is_rejected_not_raised() -> None:
    parser = JsonLinesParser(SCHEMA)
    batch, rejected = parser.parse([GOOD[0], DEEP_ARRAY, DEEP_OBJECT, GOOD[1]])
    assert batch.labels.tolist() == [1.0, 0.0]
    assert [(r.index, r.reason, r.detail) for r in rejected] == [
        (1, RejectReason.INVALID_JSON, "JSON nested too deeply"),
        (2, RejectReason.INVALID_JSON, "JSON nested too deeply"),
    ]
    assert rejected[0].raw == DEEP_ARRAY


def test_event_time_that_overflows_to_inf_is_rejected() -> None:
    batch, rejected = JsonLinesParser(SCHEMA).parse([GOOD[0], b'{"label": 1, "tags": "x", "ts": 1e400}', GOOD[1]])
    assert batch.event_time is not None and np.isfinite(batch.event_time).all()
    assert batch.event_time.tolist() == [1700000000.0, 1700000001.5]
    ((index, reason, detail),) = [(r.index, r.reason, r.detail) for r in rejected]
    assert (index, reason) == (1, RejectReason.SCHEMA) and "'ts'" in detail and "finite" in detail


class _BuggyParser:
    """A real parser that raises (like a bug would) on any batch holding a record with ``boom``."""

    def __init__(self) -> None:
        self.inner = JsonLinesParser(SCHEMA)
        self.schema = SCHEMA

    def parse(self, values: Sequence[bytes]) -> tuple[Batch, list[Rejected]]:
        if any(b"boom" in v for v in values):
            raise IndexError("index 7 is out of bounds")
        return self.inner.parse(values)


def test_a_parser_failure_is_confined_to_the_record_that_causes_it() -> None:
    values = [GOOD[0], b'{"label": 1, "tags": "boom"}', b'{"label": 0, "age": "x"}', GOOD[1]]
    batch, rejected = parse_isolating(_BuggyParser(), values)
    assert batch.labels.tolist() == [1.0, 0.0]
    assert [(r.index, r.reason) for r in rejected] == [(1, RejectReason.PARSER_ERROR), (2, RejectReason.BAD_DENSE)]
    assert rejected[0].detail == "IndexError: index 7 is out of bounds" and rejected[0].raw == values[1]
    assert parse_isolating(_BuggyParser(), GOOD)[0].labels.tolist() == [1.0, 0.0]


@pytest.mark.process
def test_poison_pill_on_the_topic_is_dead_lettered_and_the_partition_moves(
    broker: EmbeddedBroker, kafka_config: Callable[..., KafkaConfig], read_topic: Callable[..., list[Any]]
) -> None:
    config = kafka_config(partitions=1, max_message_bytes=65536)
    stream = [GOOD[0], DEEP_ARRAY, GOOD[1], b'{"label": 1, "tags": "x", "ts": 1e400}', GOOD[0]]
    bootstrap = [broker.bootstrap]
    with RecordProducer(config, client_options(config, bootstrap)) as producer:
        producer.send_all(stream)
    batches = []
    with StreamConsumer(config, SCHEMA, bootstrap) as consumer:
        for _ in range(200):
            batch = consumer.poll_batch()
            if batch is not None:
                batches.append(batch)
                consumer.tracker.mark_pushed(batch)
            if sum(map(len, batches)) >= 3 and sum(consumer.reject_counts.values()) >= 2:
                break
        counts = consumer.reject_counts
        committable = consumer.committable()
    assert sum(map(len, batches)) == 3
    assert counts == {"invalid_json": 1, "schema": 1}
    assert committable == {0: len(stream)}  # past the poison pill: a restart does not read it again
    letters = read_topic(config.dead_letter_topic, 2)
    assert sorted(r.value for r in letters) == sorted([stream[1], stream[3]])
