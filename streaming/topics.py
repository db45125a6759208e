"""Topic admin: create the events topic and the dead-letter topic when missing."""

from __future__ import annotations

from typing import Any

from kafka import KafkaAdminClient
from kafka.admin import NewTopic
from kafka.errors import KafkaError, TopicAlreadyExistsError

from core.errors import Unavailable
from streaming.kafka_config import KafkaConfig


def ensure_topics(config: KafkaConfig, options: dict[str, Any]) -> list[str]:
    """Create ``config.topic`` (``config.partitions``) and the dead-letter topic if absent; names created."""
    wanted = {config.topic: config.partitions, config.dead_letter_topic: 1}
    try:
        admin = KafkaAdminClient(**options)
    except KafkaError as err:
        raise Unavailable(f"cannot reach Kafka at {options['bootstrap_servers']}: {err}") from None
    created = []
    try:
        existing = set(admin.list_topics())
        for name, partitions in wanted.items():
            if name in existing:
                continue
            try:
                admin.create_topics([NewTopic(name, partitions, config.replication_factor)])
                created.append(name)
            except TopicAlreadyExistsError:
                pass  # another trainer created it between list and create
    except KafkaError as err:
        raise Unavailable(f"topic admin failed on {options['bootstrap_servers']}: {err}") from None
    finally:
        admin.close()
    return created
