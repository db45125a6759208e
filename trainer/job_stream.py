"""A worker's stream: its partitions of the topic as training mini-batches, and their offsets.

The consumer is not thread-safe and is shared by the training thread (marking offsets pushed,
re-seeking) and the prefetch thread (polling): every use holds ``lock``. The offset rule is in
:mod:`streaming.offsets`: a poll is marked pushed once its last mini-batch was pushed
(:mod:`trainer.minibatch`), and only pushed offsets are committable.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import time
from collections.abc import Iterable, Iterator

from kafka.errors import KafkaError

from logrecords.batch import Batch
from ps.cluster import ClusterSpec
from streaming.consumer import StreamConsumer
from trainer.job_config import JobConfig
from trainer.minibatch import MiniBatch, MiniBatcher
from trainer.passes import PassProgress
from trainer.recovery import reads_partition

LAG_REFRESH_S = 1.0  # lag asks the broker: about once a second


class JobStream:
    """Worker ``spec.rank``'s partitions of the topic (``p % W == r``), from ``offsets`` when restored."""

    def __init__(self, config: JobConfig, spec: ClusterSpec, bootstrap: list[str], *, progress: PassProgress,
                 stopping: threading.Event, offsets: dict[int, int] | None = None) -> None:
        self.config = config
        self.progress = progress
        self.stopping = stopping
        self.lock = threading.RLock()
        mine = functools.partial(reads_partition, spec)
        self.consumer = StreamConsumer(config.kafka, config.records, bootstrap,
                                       select=mine, client_id=f"streamrec-trainer-{spec.rank}")
        if offsets:
            self.consumer.seek_to({p: o for p, o in offsets.items() if mine(p)})
        self.lag_partitions: dict[int, int] = {}  # records not yet consumed, refreshed ~1/s by the poll loop
        self._lag_at = 0.0

    def _polls(self) -> Iterator[tuple[Batch | None, bool]]:
        """Each poll, and whether the consumer had caught up with the log after it."""
        while not self.stopping.is_set():
            with self.lock:
                batch = self.consumer.poll_batch()
                caught_up = self.consumer.caught_up
                now = time.monotonic()
                if now - self._lag_at >= LAG_REFRESH_S:  # under the lock: status() reads the cached figure
                    self._lag_at = now
                    with contextlib.suppress(KafkaError):
                        self.lag_partitions = self.consumer.lag()
                        self.progress.lag = sum(self.lag_partitions.values())  # for the pass's point
            yield batch, caught_up

    def minibatches(self) -> Iterator[MiniBatch | None]:
        """The polls as training mini-batches of ``batch_size`` records (fewer when the consumer
        caught up with the log: no backlog, no wait); None when a poll came back empty. A new
        batcher per call: a re-seek drops what it held."""
        batcher = MiniBatcher(self.config.batch_size, self.config.batch_wait_ms / 1000,
                              poll_size=self.config.kafka.batch_size)
        for poll, caught_up in self._polls():
            yield from batcher.add(poll, caught_up=caught_up)  # full polls of a backlog: bigger steps
            if poll is None:
                yield None

    def mark_pushed(self, polls: Iterable[Batch]) -> None:
        """``polls`` were trained whole (their last mini-batch pushed): their offsets may commit."""
        with self.lock:
            for poll in polls:
                self.consumer.tracker.mark_pushed(poll)

    @property
    def future_records(self) -> int:
        """Records whose Kafka timestamp lay past now + the allowed skew (taken as received now)."""
        return self.consumer.future_records

    @property
    def rejected(self) -> dict[str, int]:
        """Records refused by reason (each went to the dead letters)."""
        return self.consumer.reject_counts

    @property
    def absent_fields(self) -> dict[str, int]:
        """Records that lacked each required field of the schema, refused or trained with its default."""
        return self.consumer.absent_counts

    def committable(self) -> dict[int, int]:
        with self.lock:
            return self.consumer.committable()

    def seek(self, offsets: dict[int, int]) -> None:
        with self.lock:  # batches prefetched from before the point are dropped by the new batcher
            self.consumer.seek_to(offsets)

    def close(self) -> None:
        self.consumer.close()
