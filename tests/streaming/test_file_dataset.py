"""File datasets: streamed and in-memory (global shuffle) give the same records; bad lines counted."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest

from core.errors import InvalidInput
from logrecords.generator import PlantedModel
from logrecords.sample_encoding import criteo_lines, generated_criteo_schema
from streaming.file_dataset import FileDataset, FileMode


def write(path: Path, lines: list[bytes]) -> Path:
    data = b"\n".join(lines) + b"\n"
    path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)
    return path


def record_ids(batches: list) -> list[int]:
    return sorted(int(x) for b in batches for x in b.dense[:, 0])


def numbered(n: int, start: int = 0) -> list[bytes]:
    lines = criteo_lines(PlantedModel(seed=start).sample(n))
    return [b"\t".join([ln[:1], str(start + i).encode(), ln.split(b"\t", 2)[2]]) for i, ln in enumerate(lines)]


def test_stream_and_in_memory_read_the_same_records(tmp_path: Path) -> None:
    files = [write(tmp_path / "a.tsv", numbered(2500)), write(tmp_path / "b.tsv.gz", numbered(1500, start=2500))]
    schema = generated_criteo_schema()
    streamed = list(FileDataset(files, schema, batch_size=1000))
    assert record_ids(streamed) == list(range(4000))
    assert [int(x) for x in streamed[0].dense[:, 0]] == list(range(1000))  # streamed keeps file order

    mem = FileDataset(files, schema, batch_size=1000, mode=FileMode.IN_MEMORY, seed=3)
    epoch1, epoch2 = list(mem), list(mem)
    assert record_ids(epoch1) == record_ids(epoch2) == list(range(4000))
    order1 = [int(x) for b in epoch1 for x in b.dense[:, 0]]
    order2 = [int(x) for b in epoch2 for x in b.dense[:, 0]]
    assert order1 != order2 and order1 != list(range(4000))  # a fresh global shuffle per epoch
    # Shuffling keeps each record whole: label and ids travel with the row.
    by_id = {int(b.dense[i, 0]): (b.labels[i], b.slot_ids("C3", i).tolist()) for b in streamed for i in range(len(b))}
    for b in epoch1:
        for i in range(len(b)):
            assert by_id[int(b.dense[i, 0])] == (b.labels[i], b.slot_ids("C3", i).tolist())


def test_bad_lines_are_counted_with_their_file_and_line(tmp_path: Path) -> None:
    good = numbered(10)
    lines = [*good[:3], b"garbage", b"", *good[3:], b"1\tx" + b"\t" * 38]
    ds = FileDataset([write(tmp_path / "d.tsv", lines)], generated_criteo_schema(), batch_size=4)
    assert record_ids(list(ds)) == list(range(10))
    assert dict(ds.dead_letters.counts) == {"field_count": 1, "bad_dense": 1}


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match=r"nope\.tsv"):
        FileDataset([tmp_path / "nope.tsv"], generated_criteo_schema())


def test_last_line_without_newline_is_read(tmp_path: Path) -> None:
    path = tmp_path / "e.tsv"
    path.write_bytes(b"\n".join(numbered(3)))
    assert np.array_equal(FileDataset([path], generated_criteo_schema()).load().dense[:, 0], [0, 1, 2])
