"""Inference bundles: what a committed pass exports for serving.

Layout of ``<exports>/<version>/`` (version: zero-padded increasing integer)::

    bundle.json        manifest, written last (see BundleManifest)
    dense.arrays       dense model weights: name -> float32 array (core.atomic_files container)
    items.arrays       two-tower item vectors: ids uint64[n], vectors float32[n, d] (optional)
    popularity.arrays  two-tower items' decayed record counts, the whole job's (models.item_popularity):
                       ids uint64[m] sorted, counts float32[m], as_of float64[1] (the event time they
                       are as of); every bundle, a delta too, carries all of them (optional)
    shard-<i>/         each PS shard's save with cursor "export" (ps.shard_server layout:
                       shard.json, sparse/<table>/, dense/): a base holds every row; a delta
                       the rows changed since the previous bundle plus tombstones of evicted
                       ids (tables.table_files format)

On a local root a bundle is built in ``<exports>/.staging-<version>/`` and renamed into
place in one step, so a reader sees a whole bundle or none. An object store (stores.store:
``s3://...``) has no rename: there the bundle is written in place and ``bundle.json``, the
last object written, is what makes it exist (``list_versions`` and the service's mirror
ignore a version directory without it; the exporter deletes such leftovers at start).
Bundles apply in order: a delta names its ``parent_version``; its sparse saves chain to the
parent's (the table files check that too). ``items_full`` says whether ``items.arrays``
replaces the item set (true) or upserts into it. ``schema`` is the job's record schema
(logrecords.schema_config.SchemaConfig as JSON), with which the service hashes a request's raw
field values exactly as ingestion did (exports.raw_records); bundles written before it was
added have none and are served with hashed ids only. A reader verifies sizes and checksums of
every file before using any of it.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from core.atomic_files import decode_arrays, encode_arrays, fsync_dir, read_json, read_verified
from core.errors import CorruptData, NotFound
from stores.store import Store, open_store

BUNDLE_FORMAT = 1
MANIFEST = "bundle.json"
TRASH_PREFIX = ".trash-"  # a bundle being deleted (exports.retention): out of the listing, then removed


@dataclass(frozen=True)
class BundleManifest:
    version: int
    kind: Literal["base", "delta"]
    parent_version: int | None
    pass_id: int
    num_shards: int
    tables: list[str]
    model: dict[str, Any]
    created_at: float
    newest_record_time: float | None
    items_full: bool
    files: dict[str, dict[str, Any]] = field(default_factory=dict)
    format: int = BUNDLE_FORMAT
    schema: dict[str, Any] | None = None  # the record schema (absent in older bundles)
    # the popularity prior's weight the job chose on its latest records (trainer.prior_weight); absent: none chosen
    popularity_weight: dict[str, Any] | None = None

    def shard_dir(self, root: Path, shard: int) -> Path:
        return bundle_dir(root, self.version) / f"shard-{shard}"

    def table_dir(self, root: Path, shard: int, table: str) -> Path:
        """Where shard ``shard`` saved sparse table ``table`` (the PS save layout)."""
        return table_dir(self.shard_dir(root, shard), table)


def table_dir(shard_dir: Path, table: str) -> Path:
    return Path(shard_dir) / "sparse" / table


def bundle_dir(root: Path, version: int) -> Path:
    return Path(root) / f"{version:010d}"


def staging_dir(root: Path, version: int) -> Path:
    """Where bundle ``version`` of a local root is built before ``publish`` renames it."""
    return Path(root) / f".staging-{version:010d}"


def _stage(store: Store, version: int) -> str:
    """Where bundle ``version`` is built: a dot-dir renamed into place locally, the final
    directory itself on an object store (its manifest, written last, publishes it)."""
    return staging_dir(Path(), version).name if store.local is not None else f"{version:010d}"


def shard_save_template(root: str | Path | Store, version: int) -> str:
    """Where the trainer asks shard ``{shard}`` to save its part of bundle ``version`` (a
    template for PSAdmin.save), before ``publish``."""
    store = open_store(root)
    return store.url(f"{_stage(store, version)}/shard-{{shard}}")


def stage_shard_dirs(root: str | Path | Store, version: int, num_shards: int) -> list[str]:
    """Where each shard saved its part of bundle ``version`` before ``publish``, relative to the
    store (what the exporter reads back, e.g. the item catalogue)."""
    store = open_store(root)
    return [f"{_stage(store, version)}/shard-{i}" for i in range(num_shards)]


def clear_stage(root: str | Path | Store, version: int) -> None:
    """Remove what an earlier try at bundle ``version`` left in its build directory."""
    store = open_store(root)
    store.remove(_stage(store, version))


def publish(
    root: str | Path | Store, *, version: int, kind: Literal["base", "delta"], parent_version: int | None,
    pass_id: int, num_shards: int, tables: list[str], model: dict[str, Any], dense: dict[str, np.ndarray],
    items: tuple[np.ndarray, np.ndarray] | None = None, items_full: bool = True,
    newest_record_time: float | None = None, schema: dict[str, Any] | None = None,
    popularity: tuple[np.ndarray, np.ndarray, float] | None = None,
    popularity_weight: dict[str, Any] | None = None,
) -> BundleManifest:
    """Finish bundle ``version`` (shards already saved into ``shard_save_template``): write dense
    weights, item vectors and the manifest last, then (locally) rename it into place."""
    store = open_store(root)
    stage = _stage(store, version)
    final = f"{version:010d}"
    if store.exists(f"{final}/{MANIFEST}"):
        raise CorruptData(f"{store.url(final)}: bundle {version} already exists")
    for i in range(num_shards):
        if not store.exists(f"{stage}/shard-{i}"):
            raise NotFound(f"{store.url(stage)}: shard-{i} was not saved; cannot publish bundle {version}")
    files = {"dense": store.write_bytes(f"{stage}/dense.arrays", encode_arrays(dense))}
    if items is not None:
        ids, vectors = items
        files["items"] = store.write_bytes(f"{stage}/items.arrays",
                                           encode_arrays({"ids": ids.astype(np.uint64),
                                                          "vectors": vectors.astype(np.float32)}))
    if popularity is not None:
        ids, counts, as_of = popularity
        files["popularity"] = store.write_bytes(f"{stage}/popularity.arrays", encode_arrays(
            {"ids": ids.astype(np.uint64), "counts": counts.astype(np.float32),
             "as_of": np.array([as_of], np.float64)}))
    man = BundleManifest(version=version, kind=kind, parent_version=parent_version, pass_id=pass_id,
                         num_shards=num_shards, tables=list(tables), model=model, created_at=time.time(),
                         newest_record_time=newest_record_time, items_full=items_full, files=files,
                         schema=schema, popularity_weight=popularity_weight)
    store.write_json(f"{stage}/{MANIFEST}", asdict(man))
    if store.local is not None:
        if (store.local / final).exists():
            raise CorruptData(f"{store.local / final}: bundle {version} already exists")
        os.rename(store.local / stage, store.local / final)
        fsync_dir(store.local)
    return man


def read_manifest(root: Path, version: int) -> BundleManifest:
    path = bundle_dir(root, version) / MANIFEST
    data = read_json(path)
    try:
        man = BundleManifest(**data)
    except TypeError as exc:
        raise CorruptData(f"{path}: malformed bundle manifest ({exc})", detail={"file": str(path)}) from None
    if man.format != BUNDLE_FORMAT or man.version != version or man.kind not in ("base", "delta"):
        raise CorruptData(f"{path}: format {man.format}, version {man.version}, kind {man.kind!r} not readable "
                          f"as bundle {version}", detail={"file": str(path)})
    if man.kind == "delta" and man.parent_version is None:
        raise CorruptData(f"{path}: delta bundle without parent_version", detail={"file": str(path)})
    _check_shape(man, path)
    return man


def _check_shape(man: BundleManifest, path: Path) -> None:
    """Every field a reader indexes has the type it expects: a hand-edited or truncated manifest is
    CorruptData naming the field, never a KeyError deep in the loader."""
    problems = []
    if not isinstance(man.files, dict) or not all(isinstance(e, dict) for e in man.files.values()):
        problems.append("files must map names to file entries")
    elif "dense" not in man.files:
        problems.append("files.dense is missing")
    if not isinstance(man.tables, list) or not all(isinstance(t, str) for t in man.tables):
        problems.append("tables must be a list of names")
    if not isinstance(man.model, dict):
        problems.append("model must be an object")
    if man.schema is not None and not isinstance(man.schema, dict):
        problems.append("schema must be an object or null")
    if man.popularity_weight is not None and not isinstance(man.popularity_weight, dict):
        problems.append("popularity_weight must be an object or null")
    if not isinstance(man.num_shards, int) or isinstance(man.num_shards, bool) or man.num_shards < 1:
        problems.append("num_shards must be a positive integer")
    if problems:
        raise CorruptData(f"{path}: malformed bundle manifest: {'; '.join(problems)}", detail={"file": str(path)})


def load_dense(root: Path, man: BundleManifest) -> dict[str, np.ndarray]:
    d = bundle_dir(root, man.version)
    return decode_arrays(read_verified(d, man.files["dense"]), str(d / "dense.arrays"))


def load_items(root: Path, man: BundleManifest) -> tuple[np.ndarray, np.ndarray] | None:
    if "items" not in man.files:
        return None
    d = bundle_dir(root, man.version)
    arrays = decode_arrays(read_verified(d, man.files["items"]), str(d / "items.arrays"))
    ids, vectors = arrays.get("ids"), arrays.get("vectors")
    if ids is None or vectors is None or ids.ndim != 1 or vectors.ndim != 2 or vectors.shape[0] != ids.shape[0]:
        raise CorruptData(f"{d / 'items.arrays'}: ids and vectors missing or of mismatched shape")
    return ids, vectors


def load_popularity(root: Path, man: BundleManifest) -> tuple[np.ndarray, np.ndarray, float] | None:
    """The bundle's decayed item counts (ids sorted, counts, the event time they are as of); None when it has none."""
    if "popularity" not in man.files:
        return None
    d = bundle_dir(root, man.version)
    path = d / "popularity.arrays"
    arrays = decode_arrays(read_verified(d, man.files["popularity"]), str(path))
    ids, counts, as_of = arrays.get("ids"), arrays.get("counts"), arrays.get("as_of")
    if (ids is None or counts is None or as_of is None or ids.ndim != 1 or counts.shape != ids.shape
            or as_of.shape != (1,)):
        raise CorruptData(f"{path}: ids, counts and as_of missing or of mismatched shape", detail={"file": str(path)})
    if ids.shape[0] > 1 and not (ids[1:] > ids[:-1]).all():
        raise CorruptData(f"{path}: item ids not sorted and distinct", detail={"file": str(path)})
    if not (np.isfinite(counts).all() and (counts >= 0).all()):
        raise CorruptData(f"{path}: counts not finite and non-negative", detail={"file": str(path)})
    return ids.astype(np.uint64), counts.astype(np.float32), float(as_of[0])


def list_versions(root: str | Path | Store) -> list[int]:
    """Published bundle versions in order (staging dirs, unpublished dirs and stray files ignored)."""
    store = open_store(root)
    return sorted(int(name) for name in store.list() if name.isdigit() and store.exists(f"{name}/{MANIFEST}"))


def discard_staging(root: str | Path | Store) -> None:
    """Remove half-built bundles and half-deleted ones left by a crash (on an object store: version
    dirs without a manifest)."""
    store = open_store(root)
    for name in store.list():
        if name.startswith((".staging-", TRASH_PREFIX)) or (store.local is None and name.isdigit()
                                            and not store.exists(f"{name}/{MANIFEST}")):
            store.remove(name)
