"""Admission and eviction settings changed on a live table: validated first, recorded by
saves, adopted by restores."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from core.errors import ConfigError
from tables.sparse_table import SparseTable
from tables.table_config import CountAdmission, EvictionConfig

from .save_support import assert_same, config, view


def test_a_restore_adopts_the_policy_in_force_at_the_save(tmp_path: Path) -> None:
    """set_policy changes a live table; saves record it; a table built from the original YAML
    that loads the save continues under the changed policy (the same job, restored)."""
    a = SparseTable(config(admission=CountAdmission(min_count=2, sketch_width=4096)))
    keys = np.arange(1, 101, dtype=np.uint64)
    a.push(keys, np.ones((100, a.width), np.float32))  # one sighting each: nothing admitted yet
    assert a.size() == 0
    new = a.set_policy(admission={"policy": "count", "min_count": 3, "sketch_width": 4096},
                       eviction=EvictionConfig(ttl_passes=1))
    assert new.admission.min_count == 3 and new.eviction.ttl_passes == 1
    assert a.stats()["pending_estimate"] == 100, "same kind and sketch shape: pending counts carry over"
    a.push(keys, np.ones((100, a.width), np.float32))
    assert a.size() == 0, "two sightings are no longer enough"
    a.save(tmp_path / "b")
    b = SparseTable(config(admission=CountAdmission(min_count=2, sketch_width=4096)))
    b.load(tmp_path / "b")
    assert b.config.admission.min_count == 3 and b.config.eviction.ttl_passes == 1
    for t in (a, b):
        t.push(keys, np.ones((100, t.width), np.float32))
    assert a.size() == b.size() == 100
    assert_same(view(b, keys), view(a, keys))


def test_set_policy_refuses_bad_settings_and_changes_nothing() -> None:
    t = SparseTable(config())
    before = t.config
    with pytest.raises(ConfigError, match="min_count"):
        t.set_policy(admission={"policy": "count", "min_count": -1})
    with pytest.raises(ConfigError, match="unknown key"):
        t.set_policy(eviction={"ttl": 3})
    assert t.config == before
