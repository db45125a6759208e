"""Checkpoint/export roots as URLs: file:// maps to a path; memory:// and s3:// (a real moto
server process) are object stores written file by file, manifests last."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import crc32c
import fsspec
import numpy as np
import pytest

from core.errors import ConfigError, CorruptData
from stores.staging import Mirror, fetched, staged_save
from stores.store import local_path_of, open_store, upload_order
from tests.s3_server import aws_env, new_bucket, s3_server
from trainer import checkpoints


def test_plain_paths_and_file_urls_are_local(tmp_path: Path) -> None:
    assert local_path_of(str(tmp_path)) == tmp_path
    assert local_path_of(f"file://{tmp_path}/ck") == tmp_path / "ck"
    store = open_store(f"file://{tmp_path}/ck")
    assert store.local == tmp_path / "ck"
    assert store.url("pass-1/shard-{shard}") == f"{tmp_path}/ck/pass-1/shard-{{shard}}"  # shards get a path


def test_file_url_with_a_host_is_refused() -> None:
    with pytest.raises(ConfigError, match="file://"):
        local_path_of("file://somehost/data")


def test_unknown_scheme_names_the_url() -> None:
    with pytest.raises(ConfigError, match="nosuchfs://"):
        open_store("nosuchfs://bucket/x")


def test_upload_order_puts_manifests_last_deepest_first() -> None:
    order = upload_order(["shard-000/MANIFEST.json", "shard-000/000001-base/sparse/emb/emb.manifest.json",
                          "shard-000/000001-base/sparse/emb/state.arrays", "0000000001/bundle.json",
                          "0000000001/dense.arrays", "shard-000/.tmp.x", "shard-0/shard.json"])
    assert order[:2] == ["0000000001/dense.arrays", "shard-000/000001-base/sparse/emb/state.arrays"]
    assert order[2] == "shard-000/000001-base/sparse/emb/emb.manifest.json"
    assert set(order[3:]) == {"shard-000/MANIFEST.json", "0000000001/bundle.json", "shard-0/shard.json"}
    assert ".tmp.x" not in " ".join(order)


@pytest.fixture(params=["local", "memory"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return str(tmp_path / "root") if request.param == "local" else f"memory://streamrec-{uuid.uuid4().hex}/root"


def test_store_reads_writes_lists_and_removes(store_url: str) -> None:
    store = open_store(store_url)
    assert store.list() == [] and not store.exists("a/x.arrays")
    entry = store.write_bytes("a/x.arrays", [b"ab", np.arange(3, dtype=np.uint8), memoryview(b"c")])
    assert entry["file"] == "x.arrays" and entry["bytes"] == 6
    assert store.read_bytes("a/x.arrays") == b"ab\x00\x01\x02c"
    assert bytes(store.read_verified("a", entry)) == b"ab\x00\x01\x02c"
    with pytest.raises(CorruptData, match="checksum"):
        store.read_verified("a", {**entry, "crc32c": entry["crc32c"] ^ 1})
    with pytest.raises(CorruptData, match="missing"):
        store.read_verified("a", {**entry, "file": "gone.arrays"})
    store.write_json("a/m.json", {"k": 1})
    assert store.read_json("a/m.json") == {"k": 1}
    with pytest.raises(CorruptData, match="manifest missing"):
        store.read_json("a/none.json")
    assert store.list() == ["a"] and store.list("a") == ["m.json", "x.arrays"]
    store.remove("a")
    assert store.list() == [] and not store.exists("a/x.arrays")


def test_a_save_staged_for_a_url_lands_whole_and_comes_back(store_url: str, tmp_path: Path) -> None:
    save_url = open_store(store_url).url("pass-00000001/shard-0")
    with staged_save(save_url, scratch=tmp_path) as local:
        (local / "sparse" / "emb").mkdir(parents=True)
        (local / "sparse" / "emb" / "emb.rows").write_bytes(b"\x07" * 64)
        (local / "shard.json").write_text('{"mode": "base"}')
        (local / ".shard.json.x.tmp").write_text("torn")
    store = open_store(store_url)
    assert store.read_bytes("pass-00000001/shard-0/sparse/emb/emb.rows") == b"\x07" * 64
    if store.local is None:
        assert not store.exists("pass-00000001/shard-0/.shard.json.x.tmp")  # temp files never leave the host
    with fetched([save_url, save_url], scratch=tmp_path) as dirs:
        assert [(d / "shard.json").read_text() for d in dirs] == ['{"mode": "base"}'] * 2
    assert not any(p.name.startswith((".save-", ".load-")) for p in tmp_path.iterdir())  # scratch is cleaned


def test_a_failed_save_uploads_nothing(tmp_path: Path) -> None:
    url = f"memory://streamrec-{uuid.uuid4().hex}/ck/pass-1/shard-0"
    with pytest.raises(RuntimeError), staged_save(url, scratch=tmp_path) as local:
        (local / "x.rows").write_bytes(b"1")
        raise RuntimeError("the save failed half way")
    assert open_store(url).list() == []


def test_a_mirror_pulls_new_and_rewritten_files_only(tmp_path: Path) -> None:
    url = f"memory://streamrec-{uuid.uuid4().hex}/exports"
    writer = open_store(url)
    writer.write_bytes("0000000001/dense.arrays", [b"x" * 10])
    writer.write_json("0000000001/bundle.json", {"v": 1})
    mirror = Mirror(url, every_s=60, staging=tmp_path / "reader")
    with mirror as local:
        assert (local / "0000000001" / "bundle.json").is_file()
        assert mirror.pull() == 0  # nothing new
        writer.write_bytes("0000000001/dense.arrays", [b"y" * 12])  # rewritten
        writer.write_json("0000000002/bundle.json", {"v": 2})
        assert mirror.pull() == 2
        assert (local / "0000000001" / "dense.arrays").read_bytes() == b"y" * 12


def test_a_local_root_is_mirrored_in_place(tmp_path: Path) -> None:
    with Mirror(str(tmp_path / "plain"), every_s=60) as local:
        assert local == tmp_path / "plain" and local.is_dir()


@pytest.fixture(scope="module")
def s3_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    with s3_server(tmp_path_factory.mktemp("moto")) as env, aws_env(env):
        yield env


@pytest.mark.process
def test_passes_on_s3_commit_manifest_last_and_verify(s3_env: dict[str, str]) -> None:
    url = f"s3://{new_bucket()}/ck"
    checkpoints.write_worker_part(url, 1, 0, {"opt.m": np.arange(1000, dtype=np.float32)}, {"offsets": {"0": 7}})
    assert checkpoints.has_worker_part(url, 1, 0) and not checkpoints.has_worker_part(url, 1, 1)
    assert checkpoints.complete_passes(url) == []  # parts without a manifest are no pass
    with staged_save(checkpoints.shard_template(url, 1).format(shard=0)) as local:
        (local / "shard.json").write_text("{}")
    shard_entry = {"file": "shard.json", "bytes": 2, "crc32c": crc32c.crc32c(b"{}")}
    checkpoints.commit_pass(url, 1, {"offsets": {"0": 7}}, ranks=[0],
                            shard_entries=[{"mode": "base", "manifest": shard_entry}])
    checkpoints.write_worker_part(url, 2, 0, {}, {"offsets": {}})  # a pass that died before its manifest
    assert checkpoints.complete_passes(url) == [1]
    assert checkpoints.read_pass(url, 1)["offsets"] == {"0": 7}
    _, arrays = checkpoints.read_worker_part(url, 1, 0)
    assert np.array_equal(arrays["opt.m"], np.arange(1000, dtype=np.float32))
    assert checkpoints.discard_incomplete(url) == [2]

    fs = fsspec.filesystem("s3")
    fs.pipe_file(url[5:] + "/pass-00000001/worker-0.arrays", b"\x00" * 10)  # overwritten behind our back
    with pytest.raises(CorruptData, match=r"worker-0\.arrays"):
        checkpoints.read_pass(url, 1)
    checkpoints.remove_pass(url, 1)
    assert checkpoints.complete_passes(url) == [] and open_store(url).list() == []


def test_a_bundle_on_an_object_store_exists_once_its_manifest_is_written(tmp_path: Path) -> None:
    from exports import bundle

    url = f"memory://streamrec-{uuid.uuid4().hex}/exports"
    store = open_store(url)
    with staged_save(bundle.shard_save_template(url, 1).format(shard=0)) as local:
        (local / "shard.json").write_text("{}")
    assert bundle.list_versions(url) == []  # no rename on a store: built in place, not yet published
    bundle.publish(url, version=1, kind="base", parent_version=None, pass_id=1, num_shards=1, tables=[], model={},
                   dense={"w": np.ones(3, np.float32)})
    assert bundle.list_versions(url) == [1]
    store.write_bytes("0000000002/dense.arrays", [b"x"])  # what a crashed export left
    assert bundle.list_versions(url) == [1]
    bundle.discard_staging(url)
    assert store.list() == ["0000000001"]
    with Mirror(url, every_s=60, staging=tmp_path / "service") as local:
        man = bundle.read_manifest(local, 1)
        assert np.array_equal(bundle.load_dense(local, man)["w"], np.ones(3, np.float32))
