"""The streaming consumer: Kafka records -> parsed micro-batches, bad records -> dead letters.

A micro-batch closes when it holds ``batch_size`` records, or ``batch_timeout_ms`` has passed,
or the consumer has caught up with the log (a Kafka poll came back short and every assigned
partition is read to its highwater: waiting would only add latency), whichever comes first; a
poll never waits longer. ``caught_up`` tells the caller which: a backlog still gives full
batches, whatever the arrival rate. A trainer reads the partitions it selects (``select``;
all by default) of those the topic has, without a consumer group: the topic's metadata, not the
config, says which exist, re-read every ``metadata_refresh_ms`` so that a partition added
while running is read too, from its beginning. Offsets follow the rule of
:mod:`streaming.offsets`: the trainer calls ``tracker.mark_pushed(batch)`` after pushing
gradients and checkpoints ``committable()``; on restart ``seek_to(offsets)`` resumes exactly
there. Offsets handed in and out count the stream's records before this log's first offset
(``log_base``: a replay resumed on a new log), so a pass's offsets say which records of the
stream it trained whichever log they were read from.
"""

from __future__ import annotations

import bisect
import dataclasses
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

from kafka import KafkaConsumer, TopicPartition
from kafka.errors import KafkaError

from core.errors import Unavailable
from logrecords.batch import Batch
from logrecords.isolated_parse import parse_isolating
from logrecords.parsers import make_parser
from logrecords.schema_config import SchemaConfig
from streaming.connection import client_options
from streaming.dead_letter import DeadLetters
from streaming.fast_records import install as install_fast_records
from streaming.kafka_config import KafkaConfig
from streaming.log_bounds import past_the_end
from streaming.offsets import OffsetTracker

log = logging.getLogger(__name__)
# A producer's clock may run ahead of ours by this much; a later timestamp is not taken as a receipt time.
FUTURE_SKEW_S = 60.0


class StreamConsumer:
    """Reads ``config.topic`` as parsed micro-batches. Use as a context manager or call ``close()``."""

    def __init__(
        self,
        config: KafkaConfig,
        schema: SchemaConfig,
        bootstrap: list[str],
        *,
        select: Callable[[int], bool] | None = None,
        dead_letters: DeadLetters | None = None,
        client_id: str = "streamrec-trainer",
    ) -> None:
        self.config = config
        self.parser = make_parser(schema, max_message_bytes=config.max_message_bytes)
        self.tracker = OffsetTracker()
        options = client_options(config, bootstrap)
        self._options = options
        self._owns_dead_letters = dead_letters is None
        self.dead_letters = dead_letters or DeadLetters.to_topic(options, config.dead_letter_topic)
        self._restore: dict[int, int] = {}
        self._base = {int(p): int(o) for p, o in config.log_base.items()}
        self._select = select
        self._partitions_at = 0.0  # when the topic's partitions were last compared with the assignment
        self.records_delivered = 0
        # records stamped past now + FUTURE_SKEW_S (a clock ahead, or forged), counted in the polls where a
        # partition's newest record is: only those could move a receipt time (no per-record look otherwise)
        self.future_records = 0
        self.batches_delivered = 0
        self.caught_up = False  # the last poll_batch read every assigned partition to its end (no backlog)
        self._consumer = KafkaConsumer(
            **options,
            client_id=client_id,
            group_id=None,  # partitions are assigned, not shared through a group
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            max_poll_records=config.batch_size,
            # Room for one oversized message per partition so it can be dead-lettered, not stall.
            max_partition_fetch_bytes=max(8 << 20, 2 * config.max_message_bytes),
            fetch_max_bytes=64 << 20,
            max_poll_interval_ms=config.max_poll_interval_ms,
            session_timeout_ms=config.session_timeout_ms,
            metadata_max_age_ms=config.metadata_refresh_ms,  # partitions added to the topic show up this soon
            heartbeat_interval_ms=max(100, config.session_timeout_ms // 3),
        )
        install_fast_records(self._consumer)  # a batch's records decoded by one kernel, not one by one in Python
        if not self._consumer.partitions_for_topic(config.topic):
            raise Unavailable(f"topic '{config.topic}' has no partitions (does it exist?)")
        self._follow_partitions()

    def _follow_partitions(self) -> None:
        """Assign every selected partition the topic's metadata names; a new one is read from its
        beginning (no offset of it was restored) or from its restored offset."""
        self._partitions_at = time.monotonic()
        topic = self.config.topic
        found = self._consumer.partitions_for_topic(topic) or set()
        wanted = {p for p in found if self._select is None or self._select(p)}
        have = {tp.partition for tp in self._consumer.assignment()}
        if wanted <= have:
            return
        if have:
            log.info("topic '%s' has new partitions %s: reading them from their beginning", topic,
                     sorted(wanted - have))
        self._consumer.assign([TopicPartition(topic, p) for p in sorted(wanted | have)])
        self._apply_restore(sorted(wanted - have))

    # -- reading ---------------------------------------------------------------------------

    def poll_batch(self) -> Batch | None:
        """The next micro-batch, or None when no good record arrived within ``batch_timeout_ms``.

        Records of a batch are parsed together; rejected ones go to the dead-letter topic. A
        batch whose records were all rejected is issued and marked pushed at once (nothing to
        train), so its offsets still advance.
        """
        if time.monotonic() - self._partitions_at >= self.config.metadata_refresh_ms / 1000:
            self._follow_partitions()
        chunks = self._collect()
        self.caught_up = self._at_end()
        if not chunks:
            return None
        values: list[bytes] = []
        positions: dict[int, tuple[int, int]] = {}
        starts: list[int] = []
        for tp, recs in chunks:
            starts.append(len(values))
            values.extend([r.value or b"" for r in recs])
            lo, hi = recs[0].offset, recs[-1].offset
            old = positions.get(tp.partition)
            positions[tp.partition] = (lo, hi) if old is None else (old[0], hi)
        batch, rejected = parse_isolating(self.parser, values)
        # a partition's last record is its newest (append order): no per-record look at timestamps
        stamps = [recs[-1].timestamp for _, recs in chunks if recs[-1].timestamp is not None and recs[-1].timestamp > 0]
        received_at = max(stamps) / 1000.0 if stamps else None
        limit = time.time() + FUTURE_SKEW_S
        if received_at is not None and received_at > limit:
            received_at = self._future_stamped(chunks, limit)
        batch = dataclasses.replace(batch, positions=positions, received_at=received_at)
        if rejected:
            sources = []
            for r in rejected:
                c = bisect.bisect_right(starts, r.index) - 1
                tp, recs = chunks[c]
                sources.append(f"{tp.topic}/{tp.partition}/{recs[r.index - starts[c]].offset}")
            self.dead_letters.publish(rejected, sources)
        self.tracker.issued(batch)
        if len(batch) == 0:
            self.tracker.mark_pushed(batch)
            return None
        self.records_delivered += len(batch)
        self.batches_delivered += 1
        return batch

    def _future_stamped(self, chunks: list[tuple[TopicPartition, list[Any]]], limit: float) -> float:
        """Counts the records stamped past ``limit`` (the rare case that looks at every record):
        a receipt time in the future would hold every freshness figure at zero until it passed."""
        ahead = sum(1 for _, recs in chunks for r in recs if r.timestamp is not None and r.timestamp / 1000.0 > limit)
        self.future_records += ahead
        log.warning("%d records stamped more than %.0f s ahead of this clock: their receipt time is taken as now",
                    ahead, FUTURE_SKEW_S)
        return limit

    def _collect(self) -> list[tuple[TopicPartition, list[Any]]]:
        size = self.config.batch_size
        deadline = time.monotonic() + self.config.batch_timeout_ms / 1000
        chunks: list[tuple[TopicPartition, list[Any]]] = []
        count = 0
        while count < size:
            remaining_ms = int((deadline - time.monotonic()) * 1000)
            if remaining_ms <= 0:
                break
            before, asked = count, size - count
            try:
                got = self._consumer.poll(timeout_ms=remaining_ms, max_records=asked, update_offsets=True)
            except KafkaError as err:
                raise Unavailable(f"Kafka poll failed: {err}") from None
            for tp, recs in got.items():
                if recs:
                    chunks.append((tp, recs))
                    count += len(recs)
            if chunks and count - before < asked and self._at_end():
                break  # a short poll at the log's end: nothing more is waiting, so the batch goes now
        return chunks

    def _at_end(self) -> bool:
        """Every assigned partition is read up to its highwater (from the last fetch responses)."""
        for tp in self._consumer.assignment():
            end = self._consumer.highwater(tp)
            if end is None:  # not fetched yet: unknown, so not caught up
                return False
            try:
                position = self._consumer.position(tp, timeout_ms=0)
            except KafkaError:
                return False
            if position is None or position < end:
                return False
        return True

    def batches(self, *, max_idle_s: float | None = None) -> Iterator[Batch]:
        """Yield micro-batches; stop after ``max_idle_s`` seconds without a good record (None: never)."""
        idle_since = time.monotonic()
        while True:
            batch = self.poll_batch()
            if batch is not None:
                idle_since = time.monotonic()
                yield batch
            elif max_idle_s is not None and time.monotonic() - idle_since >= max_idle_s:
                return

    # -- offsets ---------------------------------------------------------------------------

    def seek_to(self, offsets: dict[int, int]) -> None:
        """Resume each partition at the given offset (the manifest of the last committed pass,
        counted from the stream's start: ``log_base`` is taken off).

        Partitions assigned later (ones added to the topic) are positioned when they are assigned.
        """
        self._restore = {}
        for p, o in offsets.items():
            p, o = int(p), int(o) - self._base.get(int(p), 0)
            if o < 0:  # a rollback to before this log began: what it holds is all that can be read again
                log.warning("partition %d: the resume point lies %d records before this log's first one", p, -o)
            self._restore[p] = max(0, o)
        for p in past_the_end(self._options, self.config.topic, self._restore):
            self._restore[p] = 0  # the topic was recreated: its new log starts over (see log_bounds)
        self._apply_restore([tp.partition for tp in self._consumer.assignment()])

    def _apply_restore(self, partitions: list[int]) -> None:
        # Once only: a partition is positioned when it is first assigned.
        mine = {p: self._restore.pop(p) for p in partitions if p in self._restore}
        for p, off in mine.items():
            self._consumer.seek(TopicPartition(self.config.topic, p), off)
        self.tracker.start_at(mine)

    def committable(self) -> dict[int, int]:
        """Offsets safe to checkpoint (the offset rule), counted from the stream's start
        (``log_base`` added); dead letters are flushed first."""
        self.dead_letters.flush()
        return {p: o + self._base.get(p, 0) for p, o in self.tracker.committable().items()}

    def assigned(self) -> list[int]:
        return sorted(tp.partition for tp in self._consumer.assignment())

    def lag(self) -> dict[int, int]:
        """Per assigned partition: records in the log not yet read by this consumer."""
        tps = list(self._consumer.assignment())
        if not tps:
            return {}
        ends = self._consumer.end_offsets(tps)
        out = {}
        for tp in tps:
            # Take the larger of the fetch highwater and a list-offsets answer: tansu (observed with
            # v0.6.0) answers "latest" with the last batch's base offset + 1, short of the true end.
            end = max(ends.get(tp) or 0, self._consumer.highwater(tp) or 0)
            out[tp.partition] = max(0, end - self._consumer.position(tp))
        return out

    @property
    def reject_counts(self) -> dict[str, int]:
        return dict(self.dead_letters.counts)

    @property
    def absent_counts(self) -> dict[str, int]:
        """Records that lacked each required field (refused or not: logrecords.absent_fields)."""
        return dict(self.parser.check.absent)

    def metrics(self) -> dict[str, Any]:
        """Gauges for a metrics endpoint: records and batches delivered, rejects by reason, lag per partition."""
        return {
            "records": self.records_delivered,
            "batches": self.batches_delivered,
            "rejected": self.reject_counts,
            "absent_fields": self.absent_counts,
            "dead_letter_failures": self.dead_letters.failed_sends,
            "lag": self.lag(),
            "future_records": self.future_records,
            "in_flight_spans": self.tracker.in_flight(),
        }

    def close(self) -> None:
        """Close the Kafka consumer, then flush and close the dead-letter producer."""
        try:
            self._consumer.close(autocommit=False)
        finally:
            self.dead_letters.flush()
            if self._owns_dead_letters:
                self.dead_letters.close()

    def __enter__(self) -> StreamConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
