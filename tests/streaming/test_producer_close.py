"""A producer closed after its broker died leaves no thread behind: kafka-python's close() gives up
at its first flush and would leave its sender thread retrying the dead broker."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from core.errors import Unavailable
from streaming.broker import EmbeddedBroker
from streaming.connection import client_options
from streaming.kafka_config import KafkaConfig
from streaming.producer import RecordProducer
from streaming.topics import ensure_topics

pytestmark = pytest.mark.process


def test_close_after_the_broker_died_stops_the_producers_threads() -> None:
    config = KafkaConfig(topic="close-after-death", partitions=1)
    before = set(threading.enumerate())
    with EmbeddedBroker() as broker:
        options = client_options(config, [broker.bootstrap])
        ensure_topics(config, options)
        producer = RecordProducer(config, options, flush_timeout_s=1.0)
        assert producer.send_all([b'{"a": 1}'] * 10) == 10
        assert set(threading.enumerate()) - before, "the producer runs a sender thread"
        assert broker.process is not None
        os.killpg(broker.process.pid, signal.SIGKILL)
        broker.process.wait()
        with pytest.raises(Unavailable):
            producer.send_all([b'{"a": 2}'] * 10)  # left queued: close cannot flush it
        producer.close()
        left = [t.name for t in set(threading.enumerate()) - before if t.is_alive()]
        assert not left, f"threads left running after close: {left}"
        producer.close()  # a second close is a no-op
