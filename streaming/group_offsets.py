"""Committed pass offsets, recorded in the Kafka consumer group for lag tools.

Trainers read their partitions with ``assign()`` and keep their offsets in the pass manifest:
that is what recovery reads (:mod:`streaming.offsets`). Standard Kafka tools
(``kafka-consumer-groups --describe``, ``KafkaAdminClient.list_group_offsets``) show a group's
lag as the log end minus the group's committed offset, so after each committed pass its
offsets are also committed to ``kafka.group_id``. The commit carries no generation (a
"simple" group, as with ``assign()``): nothing joins the group, no rebalance starts, and the
group's offsets are never read back by streamrec.
"""

from __future__ import annotations

from kafka import KafkaConsumer, TopicPartition
from kafka.errors import KafkaError
from kafka.structs import OffsetAndMetadata

from core.errors import Unavailable
from streaming.connection import client_options
from streaming.kafka_config import KafkaConfig

COMMIT_TIMEOUT_MS = 5000  # a broker that does not answer fails the commit (connect or commit), not holds it


class GroupOffsets:
    """Commits offsets of ``config.topic`` to ``config.group_id`` without joining the group.
    Not thread-safe: one thread commits (the chief's commit finisher)."""

    def __init__(self, config: KafkaConfig, bootstrap: list[str], *, client_id: str = "streamrec-offsets") -> None:
        self.config = config
        self._options = client_options(config, bootstrap)
        self._client_id = client_id
        self._consumer: KafkaConsumer | None = None  # connected at the first commit

    def commit(self, offsets: dict[int, int]) -> None:
        """Record ``offsets`` (partition -> next offset to read, counted from the stream's start
        as a pass's are) as the group's committed offsets, offsets of this log (``log_base`` off)."""
        if not offsets:
            return
        base = self.config.log_base
        offsets = {int(p): max(0, int(o) - base.get(int(p), 0)) for p, o in offsets.items()}
        try:
            if self._consumer is None:
                self._consumer = KafkaConsumer(**self._options, client_id=self._client_id,
                                               group_id=self.config.group_id, enable_auto_commit=False,
                                               bootstrap_timeout_ms=COMMIT_TIMEOUT_MS)
            self._consumer.commit({TopicPartition(self.config.topic, int(p)): OffsetAndMetadata(int(o), "", -1)
                                   for p, o in offsets.items()}, timeout_ms=COMMIT_TIMEOUT_MS)
        except KafkaError as err:
            raise Unavailable(f"committing offsets to Kafka group '{self.config.group_id}' failed: {err}") from None

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close(autocommit=False)
            self._consumer = None
