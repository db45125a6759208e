"""The dead-letter topic: rejected records with their reason and original bytes, counted by reason.

Each dead letter carries the original message as its value and headers ``reason`` (e.g.
``bad_hex``), ``detail`` (what was wrong, human readable) and ``source`` (``topic/partition/offset``
or the file and line it came from). A message larger than ``max_value_bytes`` (a broker's
request limit would refuse it) keeps its first ``max_value_bytes`` and gets a ``truncated_from``
header with its full length. A dead letter that cannot be sent is counted under
``failed_sends`` and ingestion goes on: a dead-letter problem never stops training.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import TYPE_CHECKING, Any

from logrecords.rejects import Rejected

if TYPE_CHECKING:
    from kafka import KafkaProducer

log = logging.getLogger(__name__)

DEFAULT_MAX_VALUE_BYTES = 512 * 1024


class DeadLetters:
    """Counts rejected records by reason and, when a producer is given, publishes them."""

    def __init__(
        self, producer: KafkaProducer | None = None, topic: str | None = None, *,
        max_value_bytes: int = DEFAULT_MAX_VALUE_BYTES,
    ) -> None:
        if producer is not None and not topic:
            raise ValueError("a dead-letter producer needs a topic")
        self.producer = producer
        self.topic = topic
        self.max_value_bytes = max_value_bytes
        self.counts: Counter[str] = Counter()
        self.failed_sends = 0

    @classmethod
    def to_topic(cls, options: dict[str, Any], topic: str) -> DeadLetters:
        from kafka import KafkaProducer  # here: a file job counts its dead letters without importing Kafka

        # acks=1 rules idempotence out; said here, or the client warns that it turned it off at every start
        producer = KafkaProducer(**options, linger_ms=20, acks=1, enable_idempotence=False,
                                 max_request_size=2 * DEFAULT_MAX_VALUE_BYTES)
        return cls(producer, topic)

    def publish(self, rejected: list[Rejected], sources: list[str]) -> None:
        """Count and send ``rejected``; ``sources[i]`` names where ``rejected[i]`` came from."""
        self.counts.update(r.reason.label for r in rejected)
        if self.producer is None:
            return
        from kafka.errors import KafkaError  # loaded already: the producer is Kafka's

        for r, source in zip(rejected, sources, strict=True):
            headers = [("reason", r.reason.label.encode()), ("detail", r.detail.encode()), ("source", source.encode())]
            value = r.raw
            if len(value) > self.max_value_bytes:
                headers.append(("truncated_from", str(len(value)).encode()))
                value = value[: self.max_value_bytes]
            try:
                self.producer.send(self.topic, value=value, headers=headers).add_errback(self._failed)
            except KafkaError as err:
                self._failed(err)

    def _failed(self, err: Exception) -> None:
        self.failed_sends += 1
        log.warning("dead letter not written to %s: %s", self.topic, err)

    def flush(self, timeout_s: float = 30.0) -> None:
        if self.producer is None:
            return
        from kafka.errors import KafkaError  # loaded already: the producer is Kafka's

        try:
            self.producer.flush(timeout=timeout_s)
        except KafkaError as err:
            self._failed(err)

    def close(self) -> None:
        if self.producer is not None:
            self.producer.close(timeout=5)
            self.producer = None
