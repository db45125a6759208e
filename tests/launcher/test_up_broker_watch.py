"""The embedded Kafka broker is watched like every role of `streamrec up`: killed with kill -9, its
in-memory topics are gone, and `up` fails at once saying so and leaves no process behind,
instead of showing an idle stream; a producer whose broker died fails within its flush timeout
instead of waiting forever."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from core.errors import Unavailable
from streaming.broker import EmbeddedBroker
from streaming.connection import client_options
from streaming.kafka_config import KafkaConfig
from streaming.producer import RecordProducer
from streaming.topics import ensure_topics

from .test_up_e2e import BOUND_S, Up, run_processes

pytestmark = pytest.mark.process


def broker_pid(up: Up) -> int:
    """The run's tansu process (it carries the run's tag like every role)."""
    for pid in run_processes(up.run_dir):
        try:
            if b"tansu" in Path(f"/proc/{pid}/cmdline").read_bytes():
                return pid
        except OSError:
            continue
    raise AssertionError(f"no broker among the run's processes\n{up.output()}")


def test_a_broker_killed_under_up_fails_it_clearly_and_leaves_nothing_running(start_up: Callable[..., Up]) -> None:
    up = start_up()
    up.wait_for("a pass committed", lambda: (up.job().get("pass") or 0) >= 1)
    os.kill(broker_pid(up), signal.SIGKILL)
    assert up.exit_code(within_s=BOUND_S, after="the broker's death") == 1, up.output()  # failed, stopped every role
    said = up.output()
    assert "failed: the embedded Kafka broker died (exit -9)" in said, said
    assert "the next start resumes from the last committed pass" in said and "streamrec up: stopped" in said
    deadline = time.monotonic() + BOUND_S
    while left := run_processes(up.run_dir):
        assert time.monotonic() < deadline, f"left after the broker's death: {left}"
        time.sleep(0.2)


def test_a_producer_whose_broker_died_fails_within_its_flush_timeout() -> None:
    config = KafkaConfig(topic="flush-timeout", partitions=1)
    with EmbeddedBroker() as broker:
        options = client_options(config, [broker.bootstrap])
        ensure_topics(config, options)
        producer = RecordProducer(config, options, flush_timeout_s=2.0)
        try:
            assert producer.send_all([b'{"a": 1}'] * 10) == 10
            assert broker.process is not None
            os.killpg(broker.process.pid, signal.SIGKILL)
            broker.process.wait()
            with pytest.raises(Unavailable) as err:
                producer.send_all([b'{"a": 2}'] * 10)
            assert "producing to 'flush-timeout' failed" in err.value.message
        finally:
            producer.close()
