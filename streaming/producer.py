"""Writing records into a topic: batched, compressed, optionally rate limited (file replay).

A stream that must survive its own restart (the generator and the replay of `streamrec up`)
places its records by index: record ``i`` goes to partition ``i % P``, in order (one request
in flight). Per partition the topic then holds a prefix of that partition's records, so the
log ends say exactly which records of the stream are there (:class:`StreamOnTopic`, from the
ends at the stream's start and now): a restarted producer sends only the missing ones, after
a kill -9 too, and none twice.

A record over what one produce request carries (``max_record_bytes``) would fail the whole
send: it is refused (counted, logged) and its first ``max_message_bytes + 1`` bytes go in its
place, which every consumer rejects as oversized and dead-letters; the record keeps its place
and the ones after it go on.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import KafkaError

from core.errors import Unavailable
from streaming.kafka_config import KafkaConfig

_CHUNK = 1000  # records sent between rate checks
_CLOSE_S = 10.0  # the most a close waits for the broker to take what is queued
RECORD_OVERHEAD = 1024  # room a record and its batch header take beside the value in a produce request
log = logging.getLogger(__name__)


class RecordProducer:
    """A KafkaProducer tuned for throughput: large batches, short linger, configured compression."""

    def __init__(self, config: KafkaConfig, options: dict[str, Any], *, ordered: bool = False,
                 flush_timeout_s: float = 60.0) -> None:
        """``ordered``: one request in flight, so a retry cannot reorder a partition's records
        (what placing records by index needs: module docstring). ``flush_timeout_s``: how long a
        flush may wait for the broker; a dead broker then fails the send (Unavailable) instead of
        holding the producer forever."""
        self.config = config
        self.flush_timeout_s = flush_timeout_s
        self.sent = 0  # records handed to the client so far (also valid after an interrupt)
        self.refused = 0  # records over max_record_bytes, sent cut (module docstring)
        self.max_request_size = max(1 << 20, 2 * config.max_message_bytes)
        self.max_record_bytes = self.max_request_size - RECORD_OVERHEAD
        compression = None if config.compression == "none" else config.compression
        self._producer = KafkaProducer(
            **options,
            compression_type=compression,
            linger_ms=10,
            batch_size=512 * 1024,
            max_request_size=self.max_request_size,
            acks=1,
            enable_idempotence=False,  # acks=1 rules it out; said here, or the client warns at every start
            max_in_flight_requests_per_connection=1 if ordered else 5,
        )

    def send_all(self, records: Iterable[bytes], *, topic: str | None = None, rate: float | None = None,
                 partitions: Iterable[int] | None = None, before_chunk: Callable[[], None] | None = None,
                 chunk_size: int = _CHUNK, on_refused: Callable[[int, int], None] | None = None) -> int:
        """Send every record (at most ``rate`` per second if given), flush, and return the count.

        ``partitions``: the partition of each record, in step with ``records`` (else the client
        picks). ``before_chunk``: called before each chunk of records once what was sent before
        is flushed (on the topic): the replay's back-pressure (:mod:`streaming.backpressure`);
        ``chunk_size`` records go between two calls (and rate checks). ``on_refused(i, size)``:
        record ``i`` of this call was over ``max_record_bytes`` and went cut (module docstring;
        default: a warning naming it)."""
        target = topic or self.config.topic
        start = time.monotonic()
        sent = 0
        parts = iter(partitions) if partitions is not None else None
        try:
            for chunk in _chunks(records, chunk_size):
                if before_chunk is not None:
                    self._producer.flush(timeout=self.flush_timeout_s)
                    before_chunk()
                for i, value in enumerate(chunk, sent):
                    if len(value) > self.max_record_bytes:
                        value = self._refuse(value, i, on_refused)
                    self._producer.send(target, value=value, partition=None if parts is None else next(parts))
                    self.sent += 1
                sent += len(chunk)
                if rate:
                    ahead = sent / rate - (time.monotonic() - start)
                    if ahead > 0:
                        time.sleep(ahead)
            self._producer.flush(timeout=self.flush_timeout_s)
        except KafkaError as err:
            raise Unavailable(f"producing to '{target}' failed after {sent} records: {err}") from None
        return sent

    def _refuse(self, value: bytes, index: int, on_refused: Callable[[int, int], None] | None) -> bytes:
        self.refused += 1
        if on_refused is not None:
            on_refused(index, len(value))
        else:
            log.warning("record %d is %d bytes, over the %d a produce request takes: refused, sent cut to %d bytes "
                        "so that consumers dead-letter it as oversized", index, len(value), self.max_record_bytes,
                        self.config.max_message_bytes + 1)
        return value[: self.config.max_message_bytes + 1]

    def close(self) -> None:
        """Close the client within twice ``min(flush_timeout_s, 10 s)``, its sender thread stopped
        even when the broker died (what it never took was reported by send_all)."""
        bound_s = min(self.flush_timeout_s, _CLOSE_S)
        try:
            self._producer.close(timeout=bound_s)
        except KafkaError:
            # the flush close() begins with timed out, and close() gave up before stopping its sender thread,
            # which would go on retrying a dead broker and raise in the background later
            sender = self._producer._sender
            sender.force_close()  # fails what is still queued instead of sending it
            sender.join(bound_s)
            with contextlib.suppress(KafkaError):
                self._producer.close(timeout=0)

    def __enter__(self) -> RecordProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def log_ends(options: dict[str, Any], topic: str, partitions: int, *, probe_s: float = 10.0) -> dict[int, int]:
    """Each partition's exact end offset. tansu answers "latest" short of the true end by up to
    one batch (:mod:`streaming.log_bounds`), so each non-empty partition's end is confirmed by a
    fetch from just before it, whose high watermark is exact."""
    tps = {p: TopicPartition(topic, p) for p in range(partitions)}
    probe = KafkaConsumer(**options, group_id=None, enable_auto_commit=False)
    try:
        listed = {p: int(probe.end_offsets([tp])[tp] or 0) for p, tp in tps.items()}
        busy = [p for p, end in listed.items() if end > 0]
        if busy:
            probe.assign([tps[p] for p in busy])
            for p in busy:
                probe.seek(tps[p], listed[p] - 1)
            deadline = time.monotonic() + probe_s
            while any(probe.highwater(tps[p]) is None for p in busy):
                if time.monotonic() > deadline:
                    raise Unavailable(f"no high watermark for '{topic}' within {probe_s} s")
                probe.poll(timeout_ms=200, max_records=1)
        return {p: max(end, int(probe.highwater(tps[p]) or 0)) if p in busy else end for p, end in listed.items()}
    except KafkaError as err:
        raise Unavailable(f"reading the end offsets of '{topic}' failed: {err}") from None
    finally:
        probe.close()


@dataclass(frozen=True)
class StreamOnTopic:
    """Which records of a stream placed by index (record ``i`` in partition ``i % len(since)``)
    are on the topic: ``since`` the log ends when the stream began, ``ends`` the ends now."""

    since: tuple[int, ...]
    ends: tuple[int, ...]

    @classmethod
    def read(cls, options: dict[str, Any], topic: str, since: Mapping[int, int]) -> StreamOnTopic:
        ends = log_ends(options, topic, len(since))
        return cls(tuple(int(since[p]) for p in range(len(since))), tuple(ends[p] for p in range(len(since))))

    @property
    def partitions(self) -> int:
        return len(self.since)

    @property
    def present(self) -> tuple[int, ...]:
        """Records of the stream in each partition."""
        return tuple(max(0, e - s) for s, e in zip(self.since, self.ends, strict=True))

    def first_missing(self) -> int:
        """The index of the first record of the stream not on the topic."""
        return min(c * self.partitions + p for p, c in enumerate(self.present))

    def missing(self, start: int, n: int) -> np.ndarray:
        """Of the records ``start .. start+n-1``: which are not on the topic (bool[n])."""
        idx = np.arange(start, start + n, dtype=np.int64)
        return idx // self.partitions >= np.asarray(self.present, dtype=np.int64)[idx % self.partitions]


def parse_offsets(text: str) -> dict[int, int]:
    """``"0:12,1:30"`` -> {0: 12, 1: 30} (partition:offset pairs)."""
    out = {}
    for pair in filter(None, text.split(",")):
        p, _, o = pair.partition(":")
        out[int(p)] = int(o)
    if sorted(out) != list(range(len(out))):
        raise ValueError(f"offsets {text!r}: need every partition from 0")
    return out


def format_offsets(offsets: Mapping[int, int]) -> str:
    return ",".join(f"{p}:{o}" for p, o in sorted(offsets.items()))


def _chunks(records: Iterable[bytes], size: int) -> Iterator[list[bytes]]:
    chunk: list[bytes] = []
    for r in records:
        chunk.append(r)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def numbered_lines(path: str | Path) -> Iterator[tuple[int, bytes]]:
    """(line number from 1, line) of each non-empty line of a text file, without its line ending
    (.gz files are read decompressed)."""
    p = Path(path)
    if p.suffix == ".gz":
        import gzip

        opener: Any = gzip.open
    else:
        opener = open
    with opener(p, "rb") as f:
        for number, line in enumerate(f, 1):
            line = line.rstrip(b"\r\n")
            if line:
                yield number, line
