"""Writing records into a topic: batched, compressed, optionally rate limited (file replay)."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from kafka import KafkaProducer
from kafka.errors import KafkaError

from core.errors import Unavailable
from streaming.stream_config import KafkaConfig

_CHUNK = 1000  # records sent between rate checks


class RecordProducer:
    """A KafkaProducer tuned for throughput: large batches, short linger, configured compression."""

    def __init__(self, config: KafkaConfig, options: dict[str, Any]) -> None:
        self.config = config
        self.sent = 0  # records handed to the client so far (also valid after an interrupt)
        compression = None if config.compression == "none" else config.compression
        self._producer = KafkaProducer(
            **options,
            compression_type=compression,
            linger_ms=10,
            batch_size=512 * 1024,
            max_request_size=max(1 << 20, 2 * config.max_message_bytes),
            acks=1,
        )

    def send_all(self, records: Iterable[bytes], *, topic: str | None = None, rate: float | None = None) -> int:
        """Send every record (at most ``rate`` per second if given), flush, and return the count."""
        target = topic or self.config.topic
        start = time.monotonic()
        sent = 0
        try:
            for chunk in _chunks(records, _CHUNK):
                for value in chunk:
                    self._producer.send(target, value=value)
                    self.sent += 1
                sent += len(chunk)
                if rate:
                    ahead = sent / rate - (time.monotonic() - start)
                    if ahead > 0:
                        time.sleep(ahead)
            self._producer.flush()
        except KafkaError as err:
            raise Unavailable(f"producing to '{target}' failed after {sent} records: {err}") from None
        return sent

    def close(self) -> None:
        self._producer.close(timeout=10)

    def __enter__(self) -> RecordProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _chunks(records: Iterable[bytes], size: int) -> Iterator[list[bytes]]:
    chunk: list[bytes] = []
    for r in records:
        chunk.append(r)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def file_lines(path: str | Path) -> Iterator[bytes]:
    """Non-empty lines of a text file, without their line ending (.gz files are read decompressed)."""
    p = Path(path)
    if p.suffix == ".gz":
        import gzip

        opener: Any = gzip.open
    else:
        opener = open
    with opener(p, "rb") as f:
        for line in f:
            line = line.rstrip(b"\r\n")
            if line:
                yield line
