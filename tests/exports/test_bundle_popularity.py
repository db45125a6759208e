"""A bundle carries the job's decayed item counts (popularity.arrays) and reads them back as written;
a bundle without them reads as None, and a file that lost its shape or order is CorruptData."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from core.atomic_files import encode_arrays, write_bytes
from core.errors import CorruptData
from exports.bundle import bundle_dir, load_popularity, publish, read_manifest, staging_dir

IDS = np.array([3, 9, (1 << 64) - 1], np.uint64)
COUNTS = np.array([0.25, 7.5, 1.0])
AS_OF = 1_700_000_123.5


def _publish(root: Path, version: int, popularity: tuple[np.ndarray, np.ndarray, float] | None) -> None:
    (staging_dir(root, version) / "shard-0").mkdir(parents=True)
    publish(root, version=version, kind="base", parent_version=None, pass_id=version, num_shards=1, tables=[],
            model={}, dense={}, popularity=popularity)


def test_counts_round_trip(tmp_path: Path) -> None:
    _publish(tmp_path, 1, (IDS, COUNTS, AS_OF))
    ids, counts, as_of = load_popularity(tmp_path, read_manifest(tmp_path, 1))
    np.testing.assert_array_equal(ids, IDS)
    np.testing.assert_array_equal(counts, COUNTS.astype(np.float32))
    assert as_of == AS_OF
    _publish(tmp_path, 2, None)
    assert load_popularity(tmp_path, read_manifest(tmp_path, 2)) is None


@pytest.mark.parametrize("arrays", [
    {"ids": IDS[::-1].copy(), "counts": COUNTS.astype(np.float32), "as_of": np.array([AS_OF])},
    {"ids": IDS, "counts": COUNTS[:2].astype(np.float32), "as_of": np.array([AS_OF])},
    {"ids": IDS, "counts": COUNTS.astype(np.float32)},
    {"ids": IDS, "counts": np.array([1.0, np.nan, 2.0], np.float32), "as_of": np.array([AS_OF])},
    {"ids": IDS, "counts": np.array([1.0, -3.0, 2.0], np.float32), "as_of": np.array([AS_OF])},
], ids=["unsorted", "short-counts", "no-as-of", "nan-count", "negative-count"])
def test_a_malformed_file_is_corrupt_data(tmp_path: Path, arrays: dict[str, np.ndarray]) -> None:
    _publish(tmp_path, 1, (IDS, COUNTS, AS_OF))
    man = read_manifest(tmp_path, 1)
    entry = write_bytes(bundle_dir(tmp_path, 1) / "popularity.arrays", encode_arrays(arrays))
    man.files["popularity"] = entry  # the checksum matches: the content's shape is what is wrong
    with pytest.raises(CorruptData, match=r"popularity\.arrays"):
        load_popularity(tmp_path, man)
