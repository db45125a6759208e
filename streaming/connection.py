"""kafka-python client options from a KafkaConfig, with credentials from the environment.

Secrets are never in YAML: ``STREAMREC_KAFKA_SASL_USERNAME``, ``STREAMREC_KAFKA_SASL_PASSWORD``
and ``STREAMREC_KAFKA_SSL_PASSWORD`` (the private key password) are read here.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from core.errors import Unauthorized
from streaming.kafka_config import KafkaConfig

SASL_USERNAME_ENV = "STREAMREC_KAFKA_SASL_USERNAME"
SASL_PASSWORD_ENV = "STREAMREC_KAFKA_SASL_PASSWORD"
SSL_PASSWORD_ENV = "STREAMREC_KAFKA_SSL_PASSWORD"


def client_options(
    config: KafkaConfig, bootstrap: list[str], *, environ: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """Keyword arguments shared by KafkaProducer, KafkaConsumer and KafkaAdminClient."""
    env = os.environ if environ is None else environ
    opts: dict[str, Any] = {"bootstrap_servers": bootstrap, "security_protocol": config.security_protocol.value}
    if config.sasl_mechanism is not None:
        missing = [k for k in (SASL_USERNAME_ENV, SASL_PASSWORD_ENV) if not env.get(k)]
        if missing:
            raise Unauthorized(f"SASL {config.sasl_mechanism.value} needs environment variables {', '.join(missing)}")
        opts.update(
            sasl_mechanism=config.sasl_mechanism.value,
            sasl_plain_username=env[SASL_USERNAME_ENV],
            sasl_plain_password=env[SASL_PASSWORD_ENV],
        )
    if config.security_protocol.value.endswith("SSL"):
        for key in ("ssl_cafile", "ssl_certfile", "ssl_keyfile"):
            value = getattr(config, key)
            if value is not None:
                opts[key] = value
        if env.get(SSL_PASSWORD_ENV):
            opts["ssl_password"] = env[SSL_PASSWORD_ENV]
    return opts
