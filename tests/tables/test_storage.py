"""Checkpoint/export roots as URLs: file:// maps to a path; memory:// is mirrored, manifests last."""

from __future__ import annotations

import uuid
from pathlib import Path

import fsspec
import pytest

from tables.errors import ConfigError
from tables.storage import StorageRoot, local_path_of, mirrored, upload_order


def test_plain_paths_and_file_urls_are_local(tmp_path: Path) -> None:
    assert local_path_of(str(tmp_path)) == tmp_path
    assert local_path_of(f"file://{tmp_path}/ck") == tmp_path / "ck"
    root = StorageRoot.open(f"file://{tmp_path}/ck")
    assert root.local == tmp_path / "ck" and root.local.is_dir() and not root.mirrored
    (root.local / "x").write_text("1")
    assert root.push() == 0 and root.pull() == 0  # nothing to mirror


def test_file_url_with_a_host_is_refused() -> None:
    with pytest.raises(ConfigError, match="file://"):
        local_path_of("file://somehost/data")


def test_unknown_scheme_names_the_url() -> None:
    with pytest.raises(ConfigError, match="nosuchfs://"):
        StorageRoot.open("nosuchfs://bucket/x")


def test_upload_order_puts_manifests_last_deepest_first() -> None:
    order = upload_order(["shard-000/MANIFEST.json", "shard-000/000001-base/sparse/emb/emb.manifest.json",
                          "shard-000/000001-base/sparse/emb/state.arrays", "0000000001/bundle.json",
                          "0000000001/dense.arrays", "shard-000/.tmp.x"])
    assert order[:2] == ["0000000001/dense.arrays", "shard-000/000001-base/sparse/emb/state.arrays"]
    assert order[2] == "shard-000/000001-base/sparse/emb/emb.manifest.json"
    assert set(order[3:]) == {"shard-000/MANIFEST.json", "0000000001/bundle.json"}
    assert ".tmp.x" not in " ".join(order)


def test_memory_url_round_trip_through_two_hosts(tmp_path: Path) -> None:
    url = f"memory://streamrec-test-{uuid.uuid4().hex}/checkpoints"
    writer = StorageRoot.open(url, staging=tmp_path / "host-a")
    assert writer.mirrored
    save = writer.local / "shard-000" / "000001-base"
    save.mkdir(parents=True)
    (save / "state.arrays").write_bytes(b"\x01" * 100)
    (writer.local / "shard-000" / "MANIFEST.json").write_text('{"version": 1, "saves": []}')
    (writer.local / "shard-000" / ".MANIFEST.json.abc.tmp").write_text("torn")
    assert writer.push() == 2
    assert writer.push() == 0  # nothing changed since
    (writer.local / "shard-000" / "MANIFEST.json").write_text('{"version": 1, "saves": [1]}')
    assert writer.push() == 1

    fs = fsspec.filesystem("memory")
    assert not fs.exists(url + "/shard-000/.MANIFEST.json.abc.tmp")  # temp files never leave the host

    reader = StorageRoot.open(url, staging=tmp_path / "host-b")
    assert reader.pull() == 2
    assert (reader.local / "shard-000" / "000001-base" / "state.arrays").read_bytes() == b"\x01" * 100
    assert (reader.local / "shard-000" / "MANIFEST.json").read_text().endswith("[1]}")
    assert reader.push() == 0  # what was pulled is not uploaded back


def test_pull_of_an_empty_remote_is_nothing(tmp_path: Path) -> None:
    root = StorageRoot.open(f"memory://streamrec-empty-{uuid.uuid4().hex}", staging=tmp_path / "s")
    assert root.pull() == 0


def test_mirrors_push_a_writers_root_and_pull_into_a_readers(tmp_path: Path) -> None:
    url = f"memory://streamrec-mirror-{uuid.uuid4().hex}/exports"
    with mirrored(url, direction="push", every_s=0.05, staging=tmp_path / "writer") as local:
        (local / "0000000001").mkdir()
        (local / "0000000001" / "dense.arrays").write_bytes(b"x" * 10)
        (local / "0000000001" / "bundle.json").write_text("{}")
    # the final push on exit uploaded both files
    with mirrored(url, direction="pull", every_s=0.05, staging=tmp_path / "reader") as seen:
        assert (seen / "0000000001" / "bundle.json").read_text() == "{}"
        assert (seen / "0000000001" / "dense.arrays").stat().st_size == 10


def test_local_roots_need_no_mirror_thread(tmp_path: Path) -> None:
    with mirrored(str(tmp_path / "plain"), direction="push") as local:
        assert local == tmp_path / "plain" and local.is_dir()


def test_a_restoring_writer_pulls_first_then_pushes_its_new_files(tmp_path: Path) -> None:
    url = f"memory://streamrec-restore-{uuid.uuid4().hex}/checkpoints"
    with mirrored(url, direction="push", every_s=0.05, staging=tmp_path / "first") as local:
        (local / "MANIFEST.json").write_text("1")
    with mirrored(url, direction="push", every_s=0.05, staging=tmp_path / "second", pull_first=True) as local:
        assert (local / "MANIFEST.json").read_text() == "1"  # restored from the store
        (local / "MANIFEST.json").write_text("2")
    fs = fsspec.filesystem("memory")
    assert fs.cat_file(url + "/MANIFEST.json") == b"2"


def test_direction_none_maps_to_the_staging_dir_without_mirroring(tmp_path: Path) -> None:
    url = f"memory://streamrec-none-{uuid.uuid4().hex}/x"
    with mirrored(url, direction="none", staging=tmp_path / "s") as local:
        (local / "a").write_text("1")
    assert not fsspec.filesystem("memory").exists(url + "/a")
