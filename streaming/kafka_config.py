"""Typed configuration of the Kafka connection: brokers, topics, batching and security.

Secrets never live here: SASL and SSL key passwords are read from the environment by
:mod:`streaming.connection`, so a YAML file can be committed and shared.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Literal

import yaml
from pydantic import Field, model_validator

from core.errors import ConfigError
from core.yaml_config import FrozenModel, validate_config


class SecurityProtocol(StrEnum):
    PLAINTEXT = "PLAINTEXT"
    SSL = "SSL"
    SASL_PLAINTEXT = "SASL_PLAINTEXT"
    SASL_SSL = "SASL_SSL"


class SaslMechanism(StrEnum):
    PLAIN = "PLAIN"
    SCRAM_SHA_256 = "SCRAM-SHA-256"
    SCRAM_SHA_512 = "SCRAM-SHA-512"


class KafkaConfig(FrozenModel):
    """Where records come from and how they are batched.

    No ``bootstrap_servers`` means: start the embedded tansu broker (streaming.broker).
    """

    bootstrap_servers: tuple[str, ...] = ()
    topic: str = "events"
    dead_letter_topic: str = "events.dead"
    partitions: int = Field(default=4, ge=1)
    replication_factor: int = Field(default=1, ge=1)
    group_id: str = "streamrec-trainers"
    batch_size: int = Field(default=4096, ge=1)
    batch_timeout_ms: int = Field(default=200, ge=1)
    max_message_bytes: int = Field(default=65536, ge=64)
    # The group join waits for this rebalance timeout; keep it short for small clusters and tests.
    max_poll_interval_ms: int = Field(default=30000, ge=1000)
    session_timeout_ms: int = Field(default=10000, ge=1000)
    compression: Literal["none", "gzip", "lz4", "zstd"] = "gzip"
    security_protocol: SecurityProtocol = SecurityProtocol.PLAINTEXT
    sasl_mechanism: SaslMechanism | None = None
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None

    @model_validator(mode="after")
    def _check(self) -> KafkaConfig:
        if self.security_protocol.value.startswith("SASL") and self.sasl_mechanism is None:
            raise ValueError(f"security_protocol {self.security_protocol.value} needs sasl_mechanism")
        if self.topic == self.dead_letter_topic:
            raise ValueError("dead_letter_topic must differ from topic")
        return self


def load_kafka_config(path: str | None, **overrides: object) -> KafkaConfig:
    """KafkaConfig from the ``kafka:`` section of a YAML file (or defaults), with CLI overrides.

    Overrides that are None are ignored, so argparse defaults can be passed straight through.
    """
    data: dict[str, object] = {}
    source = "<defaults>"
    if path is not None:
        try:
            loaded = yaml.safe_load(Path(path).read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigError(f"{path}: cannot read config: {exc}", detail={"file": str(path)}) from None
        if not isinstance(loaded, dict) or not isinstance(loaded.get("kafka", {}), dict):
            raise ConfigError(f"{path}: expected a mapping with a 'kafka' mapping", detail={"file": str(path)})
        data = dict(loaded.get("kafka") or {})
        source = f"{path}:kafka"
    data.update({k: v for k, v in overrides.items() if v is not None})
    return validate_config(data, KafkaConfig, source)
