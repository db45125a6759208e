"""Record files of every format, as blocks to parse: Criteo TSV, JSON lines, CSV, Parquet.

A file's format is its extension's (``.jsonl``/``.ndjson``/``.json``, ``.csv``, ``.parquet``/``.pq``;
``.gz`` is looked through), else the schema's ``format`` (Criteo TSV, say); the same
schema section as Kafka records names the fields. Reading and parsing are apart, so a worker
of a multi-worker job reads every block but parses only its own (:func:`FileReader.blocks`,
:meth:`Block.parse`). A CSV file's first line is its header row; a Parquet file is read in
record batches of the schema's columns only.
"""

from __future__ import annotations

import gzip
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from core.errors import InvalidInput
from core.kernel_cache import kernel
from logrecords.absent_fields import AbsentFieldCheck
from logrecords.batch import Batch
from logrecords.criteo import CriteoParser
from logrecords.csv_lines import CsvLinesParser, read_header
from logrecords.parsers import CheckedParser, make_parser
from logrecords.rejects import Rejected
from logrecords.schema_config import SchemaConfig

_BLOCK_BYTES = 8 << 20
_POOL = 3  # read buffers kept for reuse (the one being split, the consumer's last block's, one free)

FORMAT_OF_SUFFIX = {
    ".jsonl": "json", ".ndjson": "json", ".json": "json",
    ".csv": "csv",
    ".parquet": "parquet", ".pq": "parquet",
}  # .tsv / .txt may be Criteo or tab-separated CSV: the schema says which


def _open(path: Path) -> BinaryIO:
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


def line_blocks(path: Path, max_lines: int, *, max_line_bytes: int | None = None
                ) -> Iterator[tuple[int, list[bytes]]]:
    """(first line number, lines) blocks of at most ``max_lines`` lines; empty lines are dropped.

    A line longer than ``max_line_bytes`` comes cut to ``max_line_bytes + 1`` bytes (so the reader
    can tell it was over) and the rest of it is read and dropped, never held. Each read is at least
    as long as the unfinished line before it, so a long line costs a few doubling reads, not one
    copy of itself per block."""
    carry = b""
    cut = False  # the unfinished line is over max_line_bytes: the rest of it is dropped
    line_no = 1
    pending: list[bytes] = []
    with _open(path) as f:
        while True:
            block = f.read(_BLOCK_BYTES if cut else max(_BLOCK_BYTES, len(carry)))
            if not block:
                break
            if cut:
                nl = block.find(b"\n")
                if nl < 0:
                    continue
                block, cut = block[nl:], False
            parts = (carry + block).split(b"\n")
            carry = parts.pop()
            if max_line_bytes is not None and len(carry) + len(block) > max_line_bytes:
                parts = [p[: max_line_bytes + 1] for p in parts]
                if len(carry) > max_line_bytes:
                    carry, cut = carry[: max_line_bytes + 1], True
            pending.extend(parts)
            while len(pending) >= max_lines:
                head, pending = pending[:max_lines], pending[max_lines:]
                yield from _drop_empty(line_no, head)
                line_no += len(head)
    if carry:
        pending.append(carry)
    if pending:
        yield from _drop_empty(line_no, pending)


def buffer_line_blocks(path: Path, max_lines: int) -> Iterator[tuple[int, tuple[np.ndarray, np.ndarray]]]:
    """:func:`line_blocks` without a bytes object per line: ``(first line number, (buf, bounds))``,
    line i of a block is ``buf[bounds[i]:bounds[i + 1]]`` with its "\n" (the file's last line
    may lack it). Newlines are found by one kernel pass per read; blocks are views of the read
    buffer. Empty lines are dropped the same way (a block with one is cut around it).

    Each read goes behind the previous one's unfinished line (``readinto``: no ``carry + chunk``
    copy of the whole read) into a buffer no earlier block still refers to (:func:`_read_buffer`),
    and a block is checked for empty lines in one kernel pass: a worker of W reads every block of
    the file, so this is paid W times per record."""
    carry = np.empty(0, np.uint8)
    line_no = 1
    pool: list[np.ndarray] = []
    ends_out = np.empty(0, np.int64)
    with _open(path) as f:
        while True:
            buf = _read_buffer(pool, carry.shape[0] + max(_BLOCK_BYTES, carry.shape[0]))  # doubling past a long line
            buf[: carry.shape[0]] = carry
            got = f.readinto(memoryview(buf)[carry.shape[0] :])
            at_end = not got
            buf = buf[: carry.shape[0] + got]
            if not buf.shape[0]:
                return
            if ends_out.shape[0] < buf.shape[0] // 8 + 1:
                ends_out = np.empty(buf.shape[0] // 8 + 1, np.int64)
            count = _newline_ends(buf, ends_out)
            ends = ends_out[:count] if count >= 0 else np.flatnonzero(buf == 10) + 1  # one past each "\n"
            if at_end:  # end of file: the last line may have no "\n"
                if not ends.shape[0] or ends[-1] != buf.shape[0]:
                    ends = np.append(ends, buf.shape[0])
                full = ends.shape[0]
            else:
                full = ends.shape[0] - ends.shape[0] % max_lines  # lines of whole blocks; the rest waits
            start = 0
            for b in range(0, full, max_lines):
                bounds = np.empty(min(max_lines, full - b) + 1, np.int64)
                bounds[0] = start
                bounds[1:] = ends[b : b + bounds.shape[0] - 1]
                if _any_empty(buf, bounds):
                    yield from _drop_empty_lines(line_no, buf, bounds)
                else:
                    yield line_no, (buf, bounds)
                line_no += bounds.shape[0] - 1
                start = int(bounds[-1])
            if at_end:
                return
            carry = buf[start:]


def _read_buffer(pool: list[np.ndarray], size: int) -> np.ndarray:
    """A buffer of at least ``size`` bytes for the next read: one of ``pool`` that no block refers to
    any more, else a new one (kept in the pool, at most _POOL). A fresh 8 MB array is mapped anew by
    the allocator and its pages faulted in and zeroed at the first write: ~0.06 us per line, paid
    for every line by every worker, as much as finding the newlines. A block's arrays are views
    whose ``base`` is the pool's buffer, so a reference count above the pool's own and this loop's
    means someone still holds one (CPython's counts: the list, the loop variable, the call's argument)."""
    for b in pool:
        if b.shape[0] >= size and sys.getrefcount(b) <= 3:
            return b
    b = np.empty(size, np.uint8)
    if len(pool) >= _POOL:
        pool.pop(0)
    pool.append(b)
    return b


_NL = np.uint64(0x0A0A0A0A0A0A0A0A)
_LOW = np.uint64(0x0101010101010101)
_HIGH = np.uint64(0x8080808080808080)


@kernel(nogil=True, error_model="numpy")
def _newline_ends(buf: np.ndarray, out: np.ndarray) -> int:
    """One past each "\n" of ``buf`` into ``out``, their count (-1: more than ``out`` holds). Eight
    bytes a test (a word has a "\n" iff (x - 0x01..) & ~x & 0x80.. is non-zero, x = word ^ 0x0a..):
    2.3 -> 1.0 ns a byte against numpy's flatnonzero(buf == 10)."""
    n = buf.shape[0]
    whole = n - n % 8
    words = buf[:whole].view(np.uint64)
    c = 0
    cap = out.shape[0]
    for w in range(words.shape[0]):
        x = words[w] ^ _NL
        if (x - _LOW) & ~x & _HIGH:
            base = w * 8
            for k in range(base, base + 8):
                if buf[k] == 10:
                    if c == cap:
                        return -1
                    out[c] = k + 1
                    c += 1
    for k in range(whole, n):
        if buf[k] == 10:
            if c == cap:
                return -1
            out[c] = k + 1
            c += 1
    return c


@kernel(nogil=True, error_model="numpy")
def _any_empty(buf: np.ndarray, bounds: np.ndarray) -> bool:
    """Whether a line of the block is empty ("\n", "\r\n", "\r" or nothing), as _drop_empty_lines decides."""
    for i in range(bounds.shape[0] - 1):
        a, z = bounds[i], bounds[i + 1]
        body = z - a
        if body > 0 and buf[z - 1] == 10:
            body -= 1
        if body == 0 or (body == 1 and buf[a] == 13):
            return True
    return False


def _drop_empty_lines(first: int, buf: np.ndarray, bounds: np.ndarray
                      ) -> Iterator[tuple[int, tuple[np.ndarray, np.ndarray]]]:
    """The block, or its runs of non-empty lines (an empty line is "\n", "\r\n", "\r" or nothing)."""
    size = np.diff(bounds)
    last = buf[np.maximum(bounds[1:] - 1, 0)]
    body = size - (last == 10)  # without the "\n"
    empty = (body == 0) | ((body == 1) & (buf[np.minimum(bounds[:-1], buf.shape[0] - 1)] == 13))
    if not empty.any():
        yield first, (buf, bounds)
        return
    kept = np.flatnonzero(~empty)
    if not kept.shape[0]:
        return
    cuts = np.flatnonzero(np.diff(kept) != 1) + 1  # runs of consecutive kept lines
    for run in np.split(kept, cuts):
        a, z = int(run[0]), int(run[-1]) + 1
        yield first + a, (buf, bounds[a : z + 1])


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


def format_of(path: str | Path) -> str | None:
    """The format a file's extension names (``.gz`` looked through), or None."""
    p = Path(path)
    suffix = Path(p.stem).suffix if p.suffix == ".gz" else p.suffix
    return FORMAT_OF_SUFFIX.get(suffix.lower())


def schema_for_file(schema: SchemaConfig, path: str | Path) -> SchemaConfig:
    """The schema with the file's format (by extension; else the schema's own)."""
    fmt = format_of(path) or schema.format
    if fmt == schema.format:
        return schema
    try:
        return SchemaConfig.model_validate(schema.model_dump() | {"format": fmt})
    except ValueError as exc:
        raise InvalidInput(f"{path}: the schema does not fit the file's format {fmt}: {exc}") from None


@dataclass(frozen=True)
class Block:
    """Records of one file read but not parsed yet: ``first`` is the line (text) or row (Parquet)
    number of the first record, 1-based. ``check`` counts the absent fields of its file's blocks
    parsed so far (None: a format without absences, Criteo)."""

    path: Path
    first: int
    data: Any
    parse_fn: Callable[[Any], tuple[Batch, list[Rejected]]]
    check: AbsentFieldCheck | None = None

    def parse(self) -> tuple[Batch, list[Rejected], list[str]]:
        """(batch, rejected, source of each rejected record as ``path:line``)."""
        batch, rejected = self.parse_fn(self.data)
        return batch, rejected, [f"{self.path}:{self.first + r.index}" for r in rejected]


class FileReader:
    """Blocks of at most ``batch_size`` records from files under one schema."""

    def __init__(self, schema: SchemaConfig, *, max_message_bytes: int = 65536) -> None:
        self.schema = schema
        self.max_message_bytes = max_message_bytes

    def blocks(self, path: str | Path, batch_size: int) -> Iterator[Block]:
        path = Path(path)
        schema = schema_for_file(self.schema, path)
        if schema.format == "parquet":
            from logrecords.parquet_reader import ParquetReader

            reader = ParquetReader(schema)
            for first, rb in reader.blocks(path, batch_size):
                yield Block(path, first, rb, reader.parse, reader.check)
            return
        if schema.format == "criteo":  # its parser reads the lines in place
            criteo = CriteoParser(schema, max_message_bytes=self.max_message_bytes)
            for first, lines in buffer_line_blocks(path, batch_size):
                yield Block(path, first, lines, criteo.parse_lines)
            return
        if schema.format != "csv":
            parser = make_parser(schema, max_message_bytes=self.max_message_bytes)
            for first, lines in line_blocks(path, batch_size):
                yield Block(path, first, lines, parser.parse, parser.check)
            return
        csv_parser: CheckedParser | None = None
        for first, lines in line_blocks(path, batch_size):
            if csv_parser is None:
                try:
                    header = read_header(lines[0], schema.delimiter)
                    csv_parser = CheckedParser(CsvLinesParser(schema, header=header,
                                                              max_message_bytes=self.max_message_bytes))
                except InvalidInput as exc:
                    raise InvalidInput(f"{path}: {exc.message}", detail=exc.detail) from None
                first, lines = first + 1, lines[1:]
                if not lines:
                    continue
            yield Block(path, first, lines, csv_parser.parse, csv_parser.check)
