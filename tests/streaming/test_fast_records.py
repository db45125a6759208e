"""streaming.fast_records decodes fetches exactly as kafka-python does: same consumer records,
same next fetch offset and counts, the same errors; through the embedded broker too."""

from __future__ import annotations

import struct
from collections.abc import Callable

import pytest
from kafka.consumer.fetcher import Fetcher
from kafka.errors import CorruptRecordError
from kafka.record import MemoryRecords
from kafka.record.memory_records import MemoryRecordsBuilder
from kafka.structs import TopicPartition

from streaming.broker import EmbeddedBroker
from streaming.fast_records import FastPartitionRecords
from streaming.kafka_config import KafkaConfig

TP = TopicPartition("events", 3)


def batch(start: int, values: list[bytes | None], *, compression: int = 0, keys: bool = False,
          headers: bool = False, magic: int = 2, ts: int = 1_700_000_000_000) -> bytes:
    builder = MemoryRecordsBuilder(magic=magic, compression_type=compression, batch_size=1 << 30, offset=start)
    for i, v in enumerate(values):
        builder.append(ts + 7 * i, f"k{i}".encode() if keys else None, v,
                       [("h", b"x")] if headers and i == 1 else None)
    builder.close()
    return builder.buffer()


def taken(cls: type, data: bytes, fetch_offset: int, n: int | None = None) -> tuple[list, int, int | None, int | None]:
    """The records taken, the next fetch offset and (all taken) the records and bytes counted as read."""
    part = cls(fetch_offset, TP, MemoryRecords(data))
    got = part.take(n)
    counts = (part.records_read, part.bytes_read) if n is None else (None, None)  # (fast: counted per batch)
    return got, part.next_fetch_offset, *counts


@pytest.mark.parametrize("case", ["plain", "keys", "nulls", "gzip", "headers", "legacy", "mid-batch", "partial"])
def test_same_records_as_kafka_python(case: str) -> None:
    values = [b'{"a": %d}' % i * (1 + i % 3) for i in range(40)]
    fetch_offset, n = 100, None
    if case == "plain":
        data = batch(100, values[:25]) + batch(125, values[25:])
    elif case == "keys":
        data = batch(100, values, keys=True)
    elif case == "nulls":
        data = batch(100, [None, b"", *values[2:]])
    elif case == "gzip":
        data = batch(100, values, compression=1) + batch(140, values[:5])
    elif case == "headers":  # a record with headers: that batch takes the reference path
        data = batch(100, values[:10], headers=True) + batch(110, values[10:])
    elif case == "legacy":
        data = batch(100, values, magic=1)
    elif case == "mid-batch":  # a fetch from inside a batch skips the records before its offset
        data, fetch_offset = batch(100, values[:20]) + batch(120, values[20:]), 113
    else:  # take some, then the rest
        data, n = batch(100, values), 15
    ref = taken(Fetcher.PartitionRecords, data, fetch_offset, n)
    fast = taken(FastPartitionRecords, data, fetch_offset, n)
    assert fast == ref
    assert len(fast[0]) == (15 if n else 140 + 5 - 100 if case == "gzip" else 140 - fetch_offset)


def test_rest_after_a_partial_take() -> None:
    data = batch(0, [b"v%d" % i for i in range(30)])
    ref, fast = Fetcher.PartitionRecords(0, TP, MemoryRecords(data)), FastPartitionRecords(0, TP, MemoryRecords(data))
    assert fast.take(10) == ref.take(10)
    assert fast.take() == ref.take()
    assert (fast.next_fetch_offset, bool(fast)) == (ref.next_fetch_offset, bool(ref)) == (30, False)


def test_corrupt_batch_raises_as_kafka_python() -> None:
    data = bytearray(batch(0, [b"value-%d" % i for i in range(5)]))
    struct.pack_into(">i", data, 57, 6)  # the header claims one record more than the batch holds
    firsts = []
    for cls in (Fetcher.PartitionRecords, FastPartitionRecords):
        part = cls(0, TP, MemoryRecords(bytes(data)))  # (the CRC covers the count: not checked here)
        part.check_crcs = False
        firsts.append(part.take())  # the records before the error, then the error
        with pytest.raises(CorruptRecordError):
            part.take()
    assert firsts[0] == firsts[1] and len(firsts[0]) == 5


@pytest.mark.process
def test_consumer_through_the_broker(broker: EmbeddedBroker, kafka_config: Callable[..., KafkaConfig]) -> None:
    from kafka import KafkaConsumer, KafkaProducer

    from streaming.fast_records import install

    topic = kafka_config(partitions=1).topic
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
    sent = [b"record-%d" % i for i in range(500)]
    for v in sent:
        producer.send(topic, v, partition=0)
    producer.flush()
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest",
                             enable_auto_commit=False)
    install(consumer)
    consumer.assign([TopicPartition(topic, 0)])
    got = []
    for _ in range(50):
        for recs in consumer.poll(timeout_ms=200).values():
            got += recs
        if len(got) >= len(sent):
            break
    consumer.close()
    assert [r.value for r in got] == sent
    assert [r.offset for r in got] == list(range(len(sent)))
    assert all(r.timestamp > 0 for r in got)
