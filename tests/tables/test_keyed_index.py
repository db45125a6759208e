"""The keyed slot hash: a secret per table, saved with it, and ids
crafted against the old unkeyed mix no longer pile into one probe run."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from core.atomic_files import decode_arrays, encode_arrays, write_bytes, write_json
from core.errors import CorruptData
from tables import hashmap
from tables.sparse_table import SparseTable
from tables.table_config import OptimizerConfig, TableConfig

M64 = (1 << 64) - 1
_M1, _M2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB


def _unxorshift(y: int, s: int) -> int:
    x = y
    for _ in range(64 // s + 1):
        x = y ^ (x >> s)
    return x


def old_mix(x: int) -> int:
    """The index's former, unkeyed hash (splitmix64 finalizer)."""
    x = ((x ^ (x >> 30)) * _M1) & M64
    x = ((x ^ (x >> 27)) * _M2) & M64
    return x ^ (x >> 31)


def crafted(n: int) -> np.ndarray:
    """Ids whose old hashes are ``i << 32``: one home slot in any old index."""
    out = []
    for i in range(1, n + 1):
        x = _unxorshift(i << 32, 31)
        x = (x * pow(_M2, -1, 1 << 64)) & M64
        x = _unxorshift(x, 27)
        x = (x * pow(_M1, -1, 1 << 64)) & M64
        out.append(_unxorshift(x, 30))
    return np.array(out, np.uint64)


def table() -> SparseTable:
    return SparseTable(TableConfig(name="t", dim=4, seed=2, optimizer=OptimizerConfig(kind="sgd", lr=0.1)))


def fill(t: SparseTable, keys: np.ndarray) -> None:
    t.push(keys, np.tile(np.arange(t.width, dtype=np.float32), (keys.shape[0], 1)) * 0.01)


def probes(t: SparseTable) -> np.ndarray:
    st = t.state
    return hashmap.probe_lengths(st.slots)


def test_crafted_ids_form_no_long_probe_runs() -> None:
    keys = crafted(20_000)
    assert len({old_mix(int(k)) & 0xFFFFFFFF for k in keys[:500]}) == 1, "all share one old home slot"
    t = table()
    fill(t, keys)
    p = probes(t)
    assert p.shape[0] == 20_000 and p.min() == 1
    # the old index would have needed 20,000 probes for the last of them; random ids here
    # stay within a few dozen (linear probing at load <= 0.7)
    r = table()
    fill(r, np.random.default_rng(0).integers(0, 2**64, 20_000, dtype=np.uint64))
    assert p.max() < 150 and p.mean() < 3.0
    assert p.mean() < 1.5 * probes(r).mean() + 0.5
    np.testing.assert_array_equal(t.lookup_rows(keys), np.arange(20_000))


def test_the_same_ids_in_two_tables_get_different_layouts() -> None:
    keys = np.random.default_rng(1).integers(0, 2**64, 2000, dtype=np.uint64)
    a, b = table(), table()
    fill(a, keys)
    fill(b, keys)
    assert not np.array_equal(a.state.hash_key, b.state.hash_key)
    assert not np.array_equal(a.state.slots, b.state.slots)
    np.testing.assert_array_equal(a.pull(keys), b.pull(keys))


def test_save_and_load_keep_the_key_and_the_layout(tmp_path: Path) -> None:
    keys = np.random.default_rng(2).integers(0, 2**64, 3000, dtype=np.uint64)
    a = table()
    fill(a, keys)
    a.save(tmp_path / "s")
    man = json.loads((tmp_path / "s" / "t.manifest.json").read_text())
    assert man["format"] == 2
    b = table()
    b.load(tmp_path / "s")
    np.testing.assert_array_equal(b.state.hash_key, a.state.hash_key)
    np.testing.assert_array_equal(b.state.slots, a.state.slots)
    np.testing.assert_array_equal(b.pull(keys), a.pull(keys))
    secret = {int(x) for x in a.state.hash_key}
    flat = json.dumps(a.stats()) + json.dumps(man)
    assert not any(str(x) in flat or format(x, "x") in flat for x in secret), "the key is never shown"


def _rewrite(path: Path, *, fmt: int, drop_key: bool) -> None:
    """Turn a save into what an older (or broken) writer made: manifest format, state file."""
    mpath = path / "t.manifest.json"
    man = json.loads(mpath.read_text())
    state = decode_arrays(memoryview((path / "t.state").read_bytes()), "t.state")
    if drop_key:
        del state["hash_key"]
    man["files"]["state"] = write_bytes(path / "t.state", encode_arrays(state))
    man["format"] = fmt
    write_json(mpath, man)


def test_format_1_saves_without_a_key_still_load(tmp_path: Path) -> None:
    keys = np.random.default_rng(3).integers(0, 2**64, 500, dtype=np.uint64)
    a = table()
    fill(a, keys)
    a.save(tmp_path / "s")
    _rewrite(tmp_path / "s", fmt=1, drop_key=True)
    b = table()
    b.load(tmp_path / "s")
    np.testing.assert_array_equal(b.pull(keys), a.pull(keys))
    assert b.contains(keys).all()
    assert b.state.hash_key.shape == (2,) and not np.array_equal(b.state.hash_key, a.state.hash_key)


@pytest.mark.parametrize(("fmt", "drop_key", "match"), [(2, True, "hash_key"), (3, False, "format 3")])
def test_a_format_2_save_without_its_key_or_a_newer_format_is_refused(tmp_path: Path, fmt: int, drop_key: bool,
                                                                      match: str) -> None:
    a = table()
    fill(a, np.arange(1, 100, dtype=np.uint64))
    a.save(tmp_path / "s")
    _rewrite(tmp_path / "s", fmt=fmt, drop_key=drop_key)
    b = table()
    fill(b, np.arange(5, 9, dtype=np.uint64))
    before = b.pull(np.arange(1, 100, dtype=np.uint64))
    with pytest.raises(CorruptData, match=match):
        b.load(tmp_path / "s")
    np.testing.assert_array_equal(b.pull(np.arange(1, 100, dtype=np.uint64)), before, "table unchanged")
