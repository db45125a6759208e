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

    bootstrap_servers: tuple[str, ...] = Field(
        (), description="Kafka brokers as host:port; empty: `streamrec up` starts the embedded broker.")
    topic: str = Field("events", description="Topic the records are read from.")
    dead_letter_topic: str = Field("events.dead",
                                   description="Topic that receives the records that could not be parsed.")
    partitions: int = Field(default=4, ge=1,
                            description="Partitions of the topic when streamrec creates it; trainer r reads the "
                                        "partitions p % workers == r of those the topic has.")
    metadata_refresh_ms: int = Field(default=5000, ge=100,
                                     description="How often a consumer re-reads the topic's partitions; one added "
                                                 "meanwhile is read from its beginning.")
    log_base: dict[int, int] = Field(default_factory=dict,
                                     description="Per partition, the records of the stream before this log's first "
                                                 "offset (set by `streamrec up` when a replay resumes on a new "
                                                 "embedded broker); pass offsets count them.")
    replication_factor: int = Field(default=1, ge=1, description="Replication factor of the topics streamrec creates.")
    group_id: str = Field("streamrec-trainers",
                          description="Consumer group the chief commits the trainers' offsets to after each pass, so "
                                      "Kafka's lag tools show the lag.")
    batch_size: int = Field(default=4096, ge=1, description="Most records one poll returns.")
    batch_timeout_ms: int = Field(default=200, ge=1,
                                  description="Longest a poll waits to fill `batch_size` while records are still "
                                              "arriving.")
    max_message_bytes: int = Field(default=65536, ge=64,
                                   description="Largest record accepted; a longer one is rejected as oversized.")
    # The group join waits for this rebalance timeout; keep it short for small clusters and tests.
    max_poll_interval_ms: int = Field(default=30000, ge=1000,
                                      description="Kafka's max.poll.interval.ms, also the rebalance timeout a group "
                                                  "join waits for.")
    session_timeout_ms: int = Field(default=10000, ge=1000,
                                    description="Kafka's session.timeout.ms: a consumer silent this long leaves the "
                                                "group.")
    compression: Literal["none", "gzip", "lz4", "zstd"] = Field(
        "gzip", description="Compression of the records streamrec produces.")
    security_protocol: SecurityProtocol = Field(
        SecurityProtocol.PLAINTEXT, description="Kafka security protocol; a SASL one needs `sasl_mechanism`.")
    sasl_mechanism: SaslMechanism | None = Field(
        None, description="SASL mechanism; the user and password come from STREAMREC_KAFKA_SASL_USERNAME and "
                          "_PASSWORD.")
    ssl_cafile: str | None = Field(None, description="CA certificate file that verifies the brokers.")
    ssl_certfile: str | None = Field(None, description="Client certificate file.")
    ssl_keyfile: str | None = Field(None,
                                    description="Client private key file (its password comes from "
                                                "STREAMREC_KAFKA_SSL_PASSWORD).")

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
