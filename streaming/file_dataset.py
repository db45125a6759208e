"""Training from files with the Kafka parsers (Paddle's QueueDataset / InMemoryDataset counterpart).

Criteo TSV, JSON lines, CSV and Parquet files, under the same schema section as Kafka records
(:mod:`logrecords.file_formats`: the format is the file's extension's, else the schema's).

``FileMode.STREAM`` reads the files in order, block by block, and yields batches as they are
parsed (bounded memory). ``FileMode.IN_MEMORY`` parses everything once and yields a fresh
global shuffle each epoch. Bad lines are counted by reason in ``dead_letters`` (optionally
published to a topic) and skipped; their source is ``path:line``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from enum import StrEnum
from pathlib import Path

import numpy as np

from core.errors import InvalidInput
from logrecords.batch import Batch, concat_batches
from logrecords.file_formats import FileReader, line_blocks
from logrecords.schema_config import SchemaConfig
from streaming.dead_letter import DeadLetters

__all__ = ["FileDataset", "FileMode", "line_blocks"]


class FileMode(StrEnum):
    STREAM = "stream"
    IN_MEMORY = "in_memory"


class FileDataset:
    """Batches from a list of Criteo TSV, JSON-lines, CSV (``.gz`` allowed) or Parquet files."""

    def __init__(
        self,
        paths: Sequence[str | Path],
        schema: SchemaConfig,
        *,
        batch_size: int = 4096,
        mode: FileMode = FileMode.STREAM,
        seed: int = 0,
        max_message_bytes: int = 65536,
        dead_letters: DeadLetters | None = None,
    ) -> None:
        self.paths = [Path(p) for p in paths]
        missing = [str(p) for p in self.paths if not p.is_file()]
        if missing:
            raise InvalidInput(f"dataset files not found: {', '.join(missing)}")
        if batch_size < 1:
            raise InvalidInput("batch_size must be >= 1")
        self.reader = FileReader(schema, max_message_bytes=max_message_bytes)
        self.batch_size = batch_size
        self.mode = mode
        self.dead_letters = dead_letters or DeadLetters()
        self._rng = np.random.default_rng(seed)
        self._memory: Batch | None = None

    def _parsed_blocks(self) -> Iterator[Batch]:
        for path in self.paths:
            for block in self.reader.blocks(path, self.batch_size):
                batch, rejected, sources = block.parse()
                if rejected:
                    self.dead_letters.publish(rejected, sources)
                if len(batch):
                    yield batch

    def load(self) -> Batch:
        """Parse every file into one in-memory batch (done once, kept)."""
        if self._memory is None:
            blocks = list(self._parsed_blocks())
            if not blocks:
                raise InvalidInput(f"no valid records in {', '.join(map(str, self.paths))}")
            self._memory = concat_batches(blocks)
        return self._memory

    def __iter__(self) -> Iterator[Batch]:
        """One epoch of batches (in memory: a new global shuffle each epoch)."""
        if self.mode is FileMode.STREAM:
            yield from self._parsed_blocks()
            return
        data = self.load()
        order = self._rng.permutation(len(data))
        for start in range(0, len(data), self.batch_size):
            yield data.take(order[start : start + self.batch_size])
