"""A restarted trainer seeks to the stored offset map and resumes exactly there; lag is per partition."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from logrecords.batch import Batch
from logrecords.generator import PlantedModel
from logrecords.sample_encoding import criteo_lines
from logrecords.schema_config import SchemaConfig
from streaming.broker import EmbeddedBroker
from streaming.connection import client_options
from streaming.consumer import StreamConsumer
from streaming.kafka_config import KafkaConfig
from streaming.producer import RecordProducer

pytestmark = pytest.mark.process

N = 4000


def numbered_lines(n: int) -> list[bytes]:
    """Criteo lines whose I1 is the record number, so a parsed record names its source."""
    lines = criteo_lines(PlantedModel(seed=5).sample(n))
    return [b"\t".join([ln[:1], str(i).encode(), ln.split(b"\t", 2)[2]]) for i, ln in enumerate(lines)]


def record_numbers(batches: list[Batch]) -> list[int]:
    return [int(x) for b in batches for x in b.dense[:, 0]]


def test_restart_from_stored_offsets_resumes_exactly_there(
    broker: EmbeddedBroker, kafka_config: Callable[..., KafkaConfig]
) -> None:
    config = kafka_config(partitions=2, batch_size=300)
    bootstrap = [broker.bootstrap]
    lines = numbered_lines(N)
    with RecordProducer(config, client_options(config, bootstrap)) as producer:
        producer.send_all(lines)

    # First trainer: trains a while, leaves the newest batch un-pushed, and checkpoints.
    seen_first: list[Batch] = []
    with StreamConsumer(config, SchemaConfig.criteo(), bootstrap) as first:
        while sum(map(len, seen_first)) < N // 2:
            batch = first.poll_batch()
            if batch is not None:
                seen_first.append(batch)
        for batch in seen_first[:-1]:
            first.tracker.mark_pushed(batch)
        manifest = first.committable()
        lag = first.lag()
        metrics = first.metrics()
    unpushed = seen_first[-1]
    # Micro-batches close by size: none exceeds batch_size, records and rejects together.
    assert all(sum(hi - lo + 1 for lo, hi in b.positions.values()) <= 300 for b in seen_first)
    # The rule: the un-pushed batch's records are not committed, everything before them is.
    for p, (lo, _hi) in unpushed.positions.items():
        assert manifest[p] == lo
    assert sum(lag.values()) == N - sum(map(len, seen_first))
    assert metrics["records"] == sum(map(len, seen_first))
    assert metrics["in_flight_spans"] == len(unpushed.positions)
    assert metrics["lag"] == lag and metrics["rejected"] == {} and metrics["dead_letter_failures"] == 0

    # Second trainer restores the manifest.
    seen_second: list[Batch] = []
    with StreamConsumer(config, SchemaConfig.criteo(), bootstrap) as second:
        second.seek_to(manifest)
        for _ in range(200):
            batch = second.poll_batch()
            if batch is None and sum(map(len, seen_second)) > 0:
                break
            if batch is not None:
                seen_second.append(batch)
                second.tracker.mark_pushed(batch)
        final = second.committable()

    # Exactly where we stopped: the first record of each partition is the manifest offset.
    for p, offset in manifest.items():
        firsts = [b.positions[p][0] for b in seen_second if p in b.positions]
        assert min(firsts) == offset
    pushed_first = record_numbers(seen_first[:-1])
    resumed = record_numbers(seen_second)
    # At least once overall, no record lost; the only repeats are the un-pushed batch's records.
    assert sorted(set(pushed_first) | set(resumed)) == list(range(N))
    assert set(pushed_first) & set(resumed) == set()
    assert set(record_numbers([unpushed])) <= set(resumed)
    assert sum(final.values()) == N  # every offset committed in the end
