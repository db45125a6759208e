"""The dead-letter topic: rejected records with their reason and original bytes, counted by reason.

Each dead letter carries the original message as its value and headers ``reason`` (e.g.
``bad_hex``), ``detail`` (what was wrong, human readable) and ``source`` (``topic/partition/offset``
or the file and line it came from).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from kafka import KafkaProducer

from streaming.rejects import Rejected


class DeadLetters:
    """Counts rejected records by reason and, when a producer is given, publishes them."""

    def __init__(self, producer: KafkaProducer | None = None, topic: str | None = None) -> None:
        if producer is not None and not topic:
            raise ValueError("a dead-letter producer needs a topic")
        self.producer = producer
        self.topic = topic
        self.counts: Counter[str] = Counter()

    @classmethod
    def to_topic(cls, options: dict[str, Any], topic: str) -> DeadLetters:
        return cls(KafkaProducer(**options, linger_ms=20, acks=1), topic)

    def publish(self, rejected: list[Rejected], sources: list[str]) -> None:
        """Count and send ``rejected``; ``sources[i]`` names where ``rejected[i]`` came from."""
        for r, source in zip(rejected, sources, strict=True):
            self.counts[r.reason.label] += 1
            if self.producer is not None:
                headers = [
                    ("reason", r.reason.label.encode()),
                    ("detail", r.detail.encode()),
                    ("source", source.encode()),
                ]
                self.producer.send(self.topic, value=r.raw, headers=headers)

    def flush(self, timeout_s: float = 30.0) -> None:
        if self.producer is not None:
            self.producer.flush(timeout=timeout_s)

    def close(self) -> None:
        if self.producer is not None:
            self.producer.close(timeout=5)
            self.producer = None
