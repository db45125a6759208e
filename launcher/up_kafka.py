"""Kafka for `streamrec up`: the embedded broker when no cluster is given, the topics, the
topic's exact end offsets when the run starts (where its record source begins) and a reader of
them (the console's consumer lag).

A broker `up` did not start is never stopped by it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from pathlib import Path
from typing import TYPE_CHECKING

from launcher.system_config import StreamrecConfig

if TYPE_CHECKING:
    from kafka import KafkaConsumer

    from streaming.broker import EmbeddedBroker

_END_OFFSETS_TIMEOUT_MS = 2000


def start_kafka(cfg: StreamrecConfig, *, servers: str | None, log_path: Path, say: Callable[[str], None],
                avoid_ports: Collection[int] = ()) -> tuple[EmbeddedBroker | None, str]:
    """Make the topics on ``servers`` (else the config's brokers, else a new embedded broker
    logging to ``log_path``, on none of ``avoid_ports``): the broker started here (or None) and the
    bootstrap servers."""
    from streaming.connection import client_options
    from streaming.topics import ensure_topics

    servers = servers or ",".join(cfg.kafka.bootstrap_servers)
    broker = None
    if not servers:
        from streaming.broker import EmbeddedBroker

        broker = EmbeddedBroker(log_path=log_path, avoid_ports=avoid_ports).start()
        servers = broker.bootstrap
        say(f"embedded Kafka broker at {servers}")
    kafka = cfg.kafka.model_copy(update={"bootstrap_servers": tuple(servers.split(","))})
    ensure_topics(kafka, client_options(kafka, list(kafka.bootstrap_servers)))
    return broker, servers


def topic_ends(cfg: StreamrecConfig, bootstrap: str) -> dict[int, int]:
    """Each partition's exact end offset now: where the run's record source starts (a restarted
    one goes on after what it produced since, :mod:`launcher.up_source`)."""
    from streaming.connection import client_options
    from streaming.producer import log_ends

    return log_ends(client_options(cfg.kafka, bootstrap.split(",")), cfg.kafka.topic, cfg.kafka.partitions)


class TopicEnd:
    """Records ever produced to the topic (its end offsets, summed), read by a consumer without
    a group: it commits nothing and joins no rebalance."""

    def __init__(self, cfg: StreamrecConfig, bootstrap: str) -> None:
        self.cfg = cfg
        self.consumer = self._consumer(bootstrap)

    def _consumer(self, bootstrap: str) -> KafkaConsumer:
        from kafka import KafkaConsumer

        from streaming.connection import client_options

        return KafkaConsumer(**client_options(self.cfg.kafka, bootstrap.split(",")), group_id=None,
                             enable_auto_commit=False)

    def __call__(self) -> int | None:
        """The sum of the end offsets, or None when the broker does not answer."""
        from kafka import TopicPartition
        from kafka.errors import KafkaError

        try:
            parts = [TopicPartition(self.cfg.kafka.topic, p) for p in range(self.cfg.kafka.partitions)]
            # bounded: the watch loop that asks also notices dead roles (the client's default is minutes)
            return int(sum(self.consumer.end_offsets(parts, timeout_ms=_END_OFFSETS_TIMEOUT_MS).values()))
        except (KafkaError, OSError, ValueError):
            return None

    def close(self) -> None:
        self.consumer.close()
