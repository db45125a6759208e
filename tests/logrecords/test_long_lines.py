"""Line reading past long lines: a line many blocks long costs a few doubling reads (not one copy of itself
per block), and a line over ``max_line_bytes`` comes cut, the rest of it read and dropped, never held whole."""

from __future__ import annotations

import tracemalloc
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import pytest

from logrecords import file_formats
from logrecords.file_formats import buffer_line_blocks, line_blocks


class CountedReads:
    """A file whose read calls are counted: each read past an unfinished line copies that line once."""

    def __init__(self, f: BinaryIO) -> None:
        self.f = f
        self.reads = 0

    def read(self, n: int) -> bytes:
        self.reads += 1
        return self.f.read(n)

    def readinto(self, buf: Any) -> int:
        self.reads += 1
        return self.f.readinto(buf)

    def __enter__(self) -> CountedReads:
        return self

    def __exit__(self, *exc: object) -> None:
        self.f.close()


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> list[CountedReads]:
    opened: list[CountedReads] = []

    def counting_open(path: Path) -> CountedReads:
        opened.append(CountedReads(open(path, "rb")))  # noqa: SIM115 (closed by CountedReads.__exit__)
        return opened[-1]

    monkeypatch.setattr(file_formats, "_open", counting_open)
    monkeypatch.setattr(file_formats, "_BLOCK_BYTES", 4096)
    return opened


def long_line_file(path: Path, line_bytes: int) -> Path:
    with open(path, "wb") as f:
        f.write(b"first\n")
        f.write(b"x" * line_bytes + b"\n")
        f.write(b"third\nfourth")  # the last line without its newline
    return path


@pytest.mark.parametrize("blocks", [line_blocks, buffer_line_blocks])
def test_a_long_line_takes_a_logarithmic_number_of_reads(tmp_path: Path, counted: list[CountedReads],
                                                         blocks: Any) -> None:
    """A 4 MiB line in 4 KiB blocks: each read is as long as the line so far, so ~log2(1024) reads, where
    re-reading behind the whole unfinished line at every block took 1,024 (and copied ~2 GiB)."""
    path = long_line_file(tmp_path / "f.txt", 4 << 20)
    got = []
    for first, block in blocks(path, 1000):
        lines = block if blocks is line_blocks else [bytes(block[0][a:z]) for a, z in
                                                      zip(block[1][:-1], block[1][1:], strict=True)]
        got += [(first + k, ln.rstrip(b"\n")) for k, ln in enumerate(lines)]
    assert got == [(1, b"first"), (2, b"x" * (4 << 20)), (3, b"third"), (4, b"fourth")]
    assert counted[0].reads <= 16


def test_a_line_over_the_limit_comes_cut_and_the_lines_around_it_whole(tmp_path: Path,
                                                                        counted: list[CountedReads]) -> None:
    path = long_line_file(tmp_path / "f.txt", 100_000)
    got = [(first + k, ln) for first, block in line_blocks(path, 2, max_line_bytes=1000)
           for k, ln in enumerate(block)]
    assert got == [(1, b"first"), (2, b"x" * 1001), (3, b"third"), (4, b"fourth")]
    _, whole = next(iter(line_blocks(path, 2, max_line_bytes=100_000)))
    assert len(whole[1]) == 100_000  # at the limit: whole
    last_cut = tmp_path / "g.txt"
    last_cut.write_bytes(b"a\n" + b"y" * 50_000)  # the over-long line is the last, without a newline
    assert [ln for _, block in line_blocks(last_cut, 10, max_line_bytes=10) for ln in block] == [b"a", b"y" * 11]


def test_a_64_mib_line_over_the_limit_is_never_held_whole(tmp_path: Path) -> None:
    """The line's bytes stream through a few read blocks: the peak of Python allocations stays under the
    line's own size (reading it whole, then joining the pieces, held it twice)."""
    size = 64 << 20
    path = tmp_path / "big.jsonl"
    with open(path, "wb") as f:
        f.write(b'{"a": 1}\n')
        chunk = b"z" * (1 << 20)
        for _ in range(size >> 20):
            f.write(chunk)
        f.write(b'\n{"a": 2}\n')
    tracemalloc.start()
    try:
        got = [ln for _, block in line_blocks(path, 100, max_line_bytes=1 << 20) for ln in block]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [len(ln) for ln in got] == [8, (1 << 20) + 1, 8]
    assert got[0] == b'{"a": 1}' and got[2] == b'{"a": 2}'
    assert peak < size // 2, f"peak {peak} bytes for a {size}-byte line"


def test_no_limit_reads_every_line_whole(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    lines = [bytes(rng.choice(list(b"abc"), int(n))) for n in rng.integers(1, 30_000, 200)]
    path = tmp_path / "f.txt"
    path.write_bytes(b"\n".join(lines) + b"\n")
    assert [ln for _, block in line_blocks(path, 7) for ln in block] == lines
