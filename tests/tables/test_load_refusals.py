"""Saves and loads that must be refused, leaving the table unchanged: out-of-order deltas,
layout mismatches, damaged or malformed files."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from core.errors import Conflict, CorruptData, InvalidInput
from tables.sparse_table import SparseTable
from tables.table_config import InitializerConfig, OptimizerConfig, TableConfig

from .save_support import POOL, assert_same, config, push, saved, view


def test_delta_without_base_or_out_of_order_is_a_conflict(tmp_path: Path) -> None:
    _, base, root = saved(tmp_path)
    b = SparseTable(config())
    push(b, POOL[100:120], np.random.default_rng(3))
    before = view(b)
    with pytest.raises(Conflict, match="load in order"):
        b.load(root / "d1")
    assert_same(view(b), before)
    b.load(base)
    at_base = view(b)
    with pytest.raises(Conflict, match="load in order"):
        b.load(root / "d2")  # skips d1
    assert_same(view(b), at_base)
    b.load(root / "d1")
    with pytest.raises(Conflict):
        b.load(root / "d1")  # twice
    b.load(root / "d2")


def test_delta_save_without_a_base_on_its_cursor(tmp_path: Path) -> None:
    a, _, _ = saved(tmp_path)
    with pytest.raises(Conflict, match="save a base first"):
        a.save(tmp_path / "x", mode="delta", cursor="export")
    with pytest.raises(InvalidInput, match="save mode"):
        a.save(tmp_path / "x", mode="full")


@pytest.mark.parametrize(
    ("other", "field"),
    [({"dim": 4}, "dim"), ({"optimizer": OptimizerConfig(kind="adam")}, "optimizer"), ({"wide": False}, "wide"),
     ({"wide_optimizer": OptimizerConfig(kind="sgd")}, "wide_optimizer"), ({"seed": 5}, "seed"),
     ({"initializer": InitializerConfig(kind="normal")}, "initializer")],
)
def test_layout_mismatch_is_a_conflict(tmp_path: Path, other: dict, field: str) -> None:
    _, base, _ = saved(tmp_path)
    fields = {"name": "t", "dim": 3, "wide": True, "seed": 4,
              "initializer": InitializerConfig(kind="uniform", scale=0.1),
              "wide_initializer": InitializerConfig(kind="uniform", scale=0.01),
              "optimizer": OptimizerConfig(kind="adagrad", lr=0.05, l2=0.01),
              "wide_optimizer": OptimizerConfig(kind="ftrl", lr=0.1, l1=0.001), **other}
    b = SparseTable(TableConfig(**fields))
    b.push([1, 2], np.ones((2, b.width), np.float32))
    before = view(b)
    with pytest.raises(Conflict, match=field) as exc:
        b.load(base)
    assert field in exc.value.detail["fields"]
    assert_same(view(b), before)


def _flip_byte(p: Path) -> None:
    data = bytearray(p.read_bytes())
    data[len(data) // 2] ^= 0x40
    p.write_bytes(bytes(data))


def _truncate(p: Path) -> None:
    p.write_bytes(p.read_bytes()[:-5])


def _edit_manifest(change: object) -> object:
    def edit(p: Path) -> None:
        man = json.loads(p.read_text())
        change(man)
        p.write_text(json.dumps(man))
    return edit


CORRUPTIONS = {
    "rows_flipped": ("t.rows", _flip_byte),
    "rows_truncated": ("t.rows", _truncate),
    "rows_missing": ("t.rows", Path.unlink),
    "state_flipped": ("t.state", _flip_byte),
    "state_truncated": ("t.state", _truncate),
    "tombstones_missing": ("t.tombstones", Path.unlink),
    "manifest_missing": ("t.manifest.json", Path.unlink),
    "manifest_garbage": ("t.manifest.json", lambda p: p.write_bytes(b"\x00\xffnot json{")),
    "manifest_list": ("t.manifest.json", lambda p: p.write_text("[1, 2]")),
    "manifest_truncated": ("t.manifest.json", _truncate),
    "manifest_no_rows": ("t.manifest.json", _edit_manifest(lambda m: m.pop("rows"))),
    "manifest_no_pass": ("t.manifest.json", _edit_manifest(lambda m: m.pop("pass"))),
    "manifest_no_epoch": ("t.manifest.json", _edit_manifest(lambda m: m.pop("epoch"))),
    "manifest_no_save_id": ("t.manifest.json", _edit_manifest(lambda m: m.pop("save_id"))),
    "manifest_bad_counters": ("t.manifest.json", _edit_manifest(lambda m: m.update(counters={"pulls": "x"}))),
    "manifest_bad_cursors": ("t.manifest.json", _edit_manifest(lambda m: m.update(cursors={"c": 5}))),
    "manifest_bad_files": ("t.manifest.json", _edit_manifest(lambda m: m["files"].update(state=7))),
    "manifest_bad_crc": ("t.rows", _edit_manifest(lambda m: m["files"]["rows"].update(crc32c=1))),
    "manifest_more_rows": ("t.rows", _edit_manifest(lambda m: m.update(rows=m["rows"] + 1))),
    "manifest_chunk_zero": ("t.rows", _edit_manifest(lambda m: m.update(chunk_rows=0))),
    "manifest_file_outside": ("t.rows", _edit_manifest(lambda m: m["files"]["rows"].update(file="../t.rows"))),
}


@pytest.mark.parametrize("mode", ["base", "delta"])
@pytest.mark.parametrize("case", list(CORRUPTIONS))
def test_corrupt_files_are_refused_and_the_table_is_unchanged(tmp_path: Path, case: str, mode: str) -> None:
    named, damage = CORRUPTIONS[case]
    _, base, root = saved(tmp_path)
    src = base if mode == "base" else root / "d1"
    bad = tmp_path / "bad"
    shutil.copytree(src, bad)
    target = "t.manifest.json" if case.startswith("manifest_") else named
    damage(bad / target)
    b = SparseTable(config())
    if mode == "delta":
        b.load(base)
    b.push(POOL[200:210], np.ones((10, b.width), np.float32))
    before, stats_before = view(b), b.stats()
    with pytest.raises(CorruptData) as exc:
        b.load(bad)
    assert named in str(exc.value), f"the error must name {named}: {exc.value}"
    assert_same(view(b), before)
    after = b.stats()
    for k in ("rows", "pass", "epoch", "admitted", "pushes", "evicted", "tombstones"):
        assert after[k] == stats_before[k], k
    if mode == "delta":  # the chain still continues after the refused load
        b.load(root / "d1")
