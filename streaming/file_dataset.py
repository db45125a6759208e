"""Training from files with the Kafka parsers (Paddle's QueueDataset / InMemoryDataset counterpart).

``FileMode.STREAM`` reads the files in order, block by block, and yields batches as they are
parsed (bounded memory). ``FileMode.IN_MEMORY`` parses everything once and yields a fresh
global shuffle each epoch. Bad lines are counted by reason in ``dead_letters`` (optionally
published to a topic) and skipped; their source is ``path:line``.
"""

from __future__ import annotations

import gzip
from collections.abc import Iterator, Sequence
from enum import StrEnum
from pathlib import Path
from typing import BinaryIO

import numpy as np

from core.errors import InvalidInput
from streaming.batch import Batch, concat_batches
from streaming.dead_letter import DeadLetters
from streaming.parsers import make_parser
from streaming.stream_config import SchemaConfig

_BLOCK_BYTES = 8 << 20


class FileMode(StrEnum):
    STREAM = "stream"
    IN_MEMORY = "in_memory"


def _open(path: Path) -> BinaryIO:
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


def line_blocks(path: Path, max_lines: int) -> Iterator[tuple[int, list[bytes]]]:
    """(first line number, lines) blocks of at most ``max_lines`` lines; empty lines are dropped."""
    carry = b""
    line_no = 1
    pending: list[bytes] = []
    with _open(path) as f:
        while True:
            block = f.read(_BLOCK_BYTES)
            if not block:
                break
            parts = (carry + block).split(b"\n")
            carry = parts.pop()
            pending.extend(parts)
            while len(pending) >= max_lines:
                head, pending = pending[:max_lines], pending[max_lines:]
                yield from _drop_empty(line_no, head)
                line_no += len(head)
    if carry:
        pending.append(carry)
    if pending:
        yield from _drop_empty(line_no, pending)


def _drop_empty(first: int, lines: list[bytes]) -> Iterator[tuple[int, list[bytes]]]:
    kept = [ln for ln in lines if ln and ln != b"\r"]
    if len(kept) == len(lines):
        yield first, lines
    elif kept:
        # Line numbers of kept lines are no longer contiguous; fall back to one block per line run.
        run: list[bytes] = []
        start = first
        for k, ln in enumerate(lines):
            if ln and ln != b"\r":
                if not run:
                    start = first + k
                run.append(ln)
            elif run:
                yield start, run
                run = []
        if run:
            yield start, run


class FileDataset:
    """Batches from a list of Criteo TSV or JSON-lines files (``.gz`` allowed)."""

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
        self.parser = make_parser(schema, max_message_bytes=max_message_bytes)
        self.batch_size = batch_size
        self.mode = mode
        self.dead_letters = dead_letters or DeadLetters()
        self._rng = np.random.default_rng(seed)
        self._memory: Batch | None = None

    def _parsed_blocks(self) -> Iterator[Batch]:
        for path in self.paths:
            for first, lines in line_blocks(path, self.batch_size):
                batch, rejected = self.parser.parse(lines)
                if rejected:
                    self.dead_letters.publish(rejected, [f"{path}:{first + r.index}" for r in rejected])
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
