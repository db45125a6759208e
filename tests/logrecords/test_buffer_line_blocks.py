"""logrecords.file_formats.buffer_line_blocks against line_blocks (the bytes-per-line reference),
and the Criteo parser reading those blocks in place against parsing the same lines as messages."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from logrecords import file_formats
from logrecords.criteo import CriteoParser
from logrecords.file_formats import buffer_line_blocks, line_blocks


def _lines_of(block: tuple[np.ndarray, np.ndarray]) -> list[bytes]:
    buf, bounds = block
    out = []
    for i in range(bounds.shape[0] - 1):
        line = buf[bounds[i] : bounds[i + 1]].tobytes()
        out.append(line[:-1] if line.endswith(b"\n") else line)
    return out


def _random_text(rng: np.random.Generator, n: int, final_newline: bool) -> bytes:
    pool = [b"", b"\r", b"a", b"bb\r", b"c\td", b"\r\r", b"xyz" * 7]
    lines = [pool[int(i)] for i in rng.integers(0, len(pool), n)]
    return b"\n".join(lines) + (b"\n" if final_newline else b"")


@pytest.mark.parametrize("seed", range(6))
def test_same_blocks_as_line_blocks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    rng = np.random.default_rng(seed)
    monkeypatch.setattr(file_formats, "_BLOCK_BYTES", int(rng.integers(1, 64)))  # reads cut lines anywhere
    path = tmp_path / "f.txt"
    path.write_bytes(_random_text(rng, int(rng.integers(0, 300)), final_newline=bool(seed % 2)))
    for max_lines in (1, 3, 7, 64):
        want = list(line_blocks(path, max_lines))
        got = [(first, _lines_of(block)) for first, block in buffer_line_blocks(path, max_lines)]
        assert got == want


def test_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "f.txt"
    path.write_bytes(b"")
    assert list(buffer_line_blocks(path, 4)) == []


def _criteo_line(rng: np.random.Generator) -> bytes:
    dense = [b"" if rng.random() < 0.2 else str(int(rng.integers(0, 50))).encode() for _ in range(13)]
    cats = [b"" if rng.random() < 0.2 else f"{int(rng.integers(0, 1 << 32)):08x}".encode() for _ in range(26)]
    line = b"\t".join([str(int(rng.integers(0, 2))).encode(), *dense, *cats])
    r = rng.random()
    if r < 0.05:
        line = line.replace(b"\t", b"\tzz", 1)  # bad dense
    elif r < 0.1:
        line += b"\t1"  # a field too many
    elif r < 0.15:
        line = line[: line.rfind(b"\t")]  # one too few
    elif r < 0.2:
        line = b"7" + line[1:]  # bad label
    elif r < 0.25:
        line += b"0" * 300  # oversized
    return line


def test_criteo_lines_in_place_parse_as_messages(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    lines = [_criteo_line(rng) for _ in range(700)]
    path = tmp_path / "f.txt"
    path.write_bytes(b"\n".join(lines) + b"\n")
    parser = CriteoParser(max_message_bytes=300)
    reasons = set()
    for first, block in buffer_line_blocks(path, 128):
        msgs = _lines_of(block)
        assert msgs == lines[first - 1 : first - 1 + len(msgs)]
        want, want_rej = parser.parse(msgs)
        got, got_rej = parser.parse_lines(block)
        assert [(r.index, r.reason, r.detail, r.raw) for r in got_rej] == \
            [(r.index, r.reason, r.detail, r.raw) for r in want_rej]
        reasons |= {r.reason for r in got_rej}
        np.testing.assert_array_equal(got.labels, want.labels)
        np.testing.assert_array_equal(got.dense, want.dense)
        assert got.slots.keys() == want.slots.keys()
        for name, (values, offsets) in want.slots.items():
            np.testing.assert_array_equal(got.slots[name][0], values)
            np.testing.assert_array_equal(got.slots[name][1], offsets)
    assert len(reasons) >= 4  # bad dense, field count, bad label, oversized


def test_hex_lookup_agrees_with_token_id() -> None:
    from logrecords.criteo import _HEX_DIGIT, _hex_id
    from logrecords.hashing import KIND_CODE, token_id
    from logrecords.schema_config import HashKind

    rng = np.random.default_rng(3)
    alphabet = b"0123456789abcdefABCDEFgG-x \xff"
    tokens = [b"0", b"f" * 14, b"F" * 15, b"deadBEEF", b"g"]
    tokens += [bytes(rng.choice(list(alphabet), int(rng.integers(1, 17)))) for _ in range(500)]
    for tok in tokens:
        buf = np.frombuffer(tok, np.uint8)
        want = token_id(buf, 0, len(tok), KIND_CODE[HashKind.HEX], 7)
        assert _hex_id(buf, 0, len(tok), 7, _HEX_DIGIT) == want, tok


@pytest.mark.parametrize("seed", range(3))
def test_blocks_kept_by_the_caller_are_never_overwritten(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         seed: int) -> None:
    """Read buffers are reused only when no block refers to them: blocks held while the reading
    goes on keep their lines."""
    rng = np.random.default_rng(seed)
    monkeypatch.setattr(file_formats, "_BLOCK_BYTES", int(rng.integers(8, 40)))
    path = tmp_path / "f.txt"
    path.write_bytes(_random_text(rng, 400, final_newline=True))
    want = list(line_blocks(path, 5))
    kept = list(buffer_line_blocks(path, 5))  # every block alive at once
    assert [(first, _lines_of(block)) for first, block in kept] == want
    every_other = []  # half the blocks kept: the other buffers are free for reuse
    for k, (first, block) in enumerate(buffer_line_blocks(path, 5)):
        if k % 2 == 0:
            every_other.append((first, block))
    assert [(first, _lines_of(block)) for first, block in every_other] == want[::2]


@pytest.mark.parametrize("seed", range(4))
def test_newline_kernel_agrees_with_numpy(seed: int) -> None:
    rng = np.random.default_rng(seed)
    buf = rng.choice(np.frombuffer(b"\n\tab\r", np.uint8), int(rng.integers(0, 300)), p=[0.1, 0.2, 0.3, 0.3, 0.1])
    want = np.flatnonzero(buf == 10) + 1
    out = np.empty(buf.shape[0] + 1, np.int64)
    count = file_formats._newline_ends(buf, out)
    assert out[:count].tolist() == want.tolist()
    if want.shape[0]:  # an output too small says so
        assert file_formats._newline_ends(buf, np.empty(want.shape[0] - 1, np.int64)) == -1
