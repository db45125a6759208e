"""streaming.group_offsets: offsets recorded in the consumer group without joining it."""

from __future__ import annotations

import pytest
from kafka import KafkaAdminClient

from core.errors import Unavailable
from launcher.launch import free_ports
from streaming.connection import client_options
from streaming.group_offsets import GroupOffsets
from streaming.kafka_config import KafkaConfig


@pytest.mark.process
def test_offsets_reach_the_group_without_a_member(broker, kafka_config) -> None:
    config = kafka_config(partitions=3)
    offsets = GroupOffsets(config, [broker.bootstrap])
    try:
        offsets.commit({0: 5, 2: 7})
        offsets.commit({0: 9, 1: 1, 2: 7})  # the next pass's: each partition moves to its new offset
    finally:
        offsets.close()
    admin = KafkaAdminClient(**client_options(config, [broker.bootstrap]))
    try:
        got = admin.list_group_offsets(config.group_id)[config.group_id]
    finally:
        admin.close()
    assert {tp.partition: om.offset for tp, om in got.items() if tp.topic == config.topic} == {0: 9, 1: 1, 2: 7}


@pytest.mark.slow
def test_an_unreachable_broker_is_a_clear_error() -> None:
    port = free_ports(1)[0]
    offsets = GroupOffsets(KafkaConfig(topic="t", group_id="g"), [f"127.0.0.1:{port}"])
    with pytest.raises(Unavailable, match="group 'g'"):
        offsets.commit({0: 1})
    offsets.close()
