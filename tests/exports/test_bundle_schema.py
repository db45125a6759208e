"""The bundle manifest carries the job's record schema; manifests written before it read as
bundles without a schema, and a schema that is not an object is CorruptData naming it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.errors import CorruptData
from exports.bundle import MANIFEST, bundle_dir, publish, read_manifest, staging_dir
from exports.raw_records import record_hasher
from logrecords.schema_config import HashKind, SchemaConfig, SlotConfig, SlotKind

SCHEMA = SchemaConfig(format="csv", label="liked", item_id="movie_id",
                      slots=(SlotConfig(name="movie_id", kind=SlotKind.SPARSE, hash=HashKind.INT),
                             SlotConfig(name="genres", kind=SlotKind.SPARSE, separator="|")))


def _publish(root: Path, schema: dict | None) -> None:
    (staging_dir(root, 1) / "shard-0").mkdir(parents=True)
    publish(root, version=1, kind="base", parent_version=None, pass_id=1, num_shards=1, tables=[], model={},
            dense={}, schema=schema)


def _edit_manifest(root: Path, edit) -> None:
    path = bundle_dir(root, 1) / MANIFEST
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


def test_schema_round_trips_and_hashes_as_the_job(tmp_path: Path) -> None:
    _publish(tmp_path, SCHEMA.model_dump(mode="json"))
    man = read_manifest(tmp_path, 1)
    assert SchemaConfig.model_validate(man.schema) == SCHEMA
    hasher = record_hasher(man.schema)
    assert hasher is not None
    (a,), _ = hasher.instances([{"genres": "Drama|Comedy"}], ["r"], slots=["genres"])
    (b,), _ = hasher.instances([{"genres": ["Drama", "Comedy"]}], ["r"], slots=["genres"])
    assert a["slots"]["genres"] == b["slots"]["genres"] and len(a["slots"]["genres"]) == 2


def test_older_manifest_has_no_schema(tmp_path: Path) -> None:
    _publish(tmp_path, SCHEMA.model_dump(mode="json"))
    _edit_manifest(tmp_path, lambda d: d.pop("schema"))
    man = read_manifest(tmp_path, 1)
    assert man.schema is None and record_hasher(man.schema) is None


def test_malformed_schema_is_corrupt_data_naming_it(tmp_path: Path) -> None:
    _publish(tmp_path, None)
    _edit_manifest(tmp_path, lambda d: d.update(schema="json"))
    with pytest.raises(CorruptData, match="schema must be an object"):
        read_manifest(tmp_path, 1)
