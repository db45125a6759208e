"""Typed streaming config: unknown keys are errors; credentials come from the environment only."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.errors import ConfigError, Unauthorized
from core.yaml_config import load_yaml
from logrecords.schema_config import SchemaConfig, SlotConfig, SlotKind
from streaming.connection import SASL_PASSWORD_ENV, SASL_USERNAME_ENV, client_options
from streaming.kafka_config import KafkaConfig, load_kafka_config


def test_kafka_section_loads_and_unknown_keys_are_named(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("kafka:\n  bootstrap_servers: [k1:9092]\n  partitions: 8\n")
    config = load_kafka_config(str(path), topic="clicks", bootstrap_servers=None)
    assert config.bootstrap_servers == ("k1:9092",) and config.partitions == 8 and config.topic == "clicks"
    path.write_text("kafka:\n  sasl_password: hunter2\n")
    with pytest.raises(ConfigError, match=r"unknown key 'sasl_password'") as err:
        load_kafka_config(str(path))
    assert str(path) in str(err.value)


def test_sasl_credentials_come_from_the_environment() -> None:
    config = KafkaConfig(bootstrap_servers=("k:9093",), security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512",
                         ssl_cafile="/etc/ca.pem")
    opts = client_options(config, ["k:9093"], environ={SASL_USERNAME_ENV: "trainer", SASL_PASSWORD_ENV: "s3cret"})
    assert opts["sasl_mechanism"] == "SCRAM-SHA-512"
    assert (opts["sasl_plain_username"], opts["sasl_plain_password"]) == ("trainer", "s3cret")
    assert opts["ssl_cafile"] == "/etc/ca.pem" and opts["security_protocol"] == "SASL_SSL"
    with pytest.raises(Unauthorized, match=SASL_PASSWORD_ENV):
        client_options(config, ["k:9093"], environ={SASL_USERNAME_ENV: "trainer"})


def test_sasl_protocol_needs_a_mechanism() -> None:
    with pytest.raises(ValueError, match="sasl_mechanism"):
        KafkaConfig(security_protocol="SASL_PLAINTEXT")


def test_schema_from_yaml_and_its_checks(tmp_path: Path) -> None:
    path = tmp_path / "schema.yaml"
    path.write_text(
        "format: json\nslots:\n"
        "  - {name: price, kind: dense}\n"
        "  - {name: user, kind: sparse, hash: fnv1a, slot_id: 7}\n"
        "  - {name: tags, kind: sparse}\n"
        "user_id: user\n"
    )
    schema = load_yaml(path, SchemaConfig)
    assert schema.slot_ids() == {"user": 7, "tags": 0}
    assert schema.dense_names == ["price"]
    with pytest.raises(ValueError, match="not a declared sparse slot"):
        SchemaConfig(slots=(SlotConfig(name="price", kind=SlotKind.DENSE),), user_id="price")
    with pytest.raises(ValueError, match="duplicate slot names"):
        SchemaConfig(slots=(SlotConfig(name="a", kind=SlotKind.DENSE), SlotConfig(name="a", kind=SlotKind.SPARSE)))
    with pytest.raises(ValueError, match="13 dense and 26 sparse"):
        SchemaConfig(format="criteo", slots=(SlotConfig(name="a", kind=SlotKind.DENSE),))
