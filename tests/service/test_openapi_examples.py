"""/openapi.json's examples come from the bundle being served: on a bundle trained on the quick
start's data (the generator's records, `streamrec up`'s default model and schema) every example
of every feature endpoint, sent as it stands, answers 200 with a non-empty result; /docs and
/redoc load only local assets, each of which answers 200."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from launcher.system_config import default_model
from logrecords.generator import PlantedModel
from logrecords.hashing import hash_strings
from logrecords.json_lines import JsonLinesParser
from logrecords.sample_encoding import generated_json_schema, json_lines
from logrecords.schema_config import HashKind, SchemaConfig, SlotConfig, SlotKind
from service.app import create_app

from .service_support import BundleBuilder, make_settings, started

SCHEMA = generated_json_schema()


def _quick_start_bundle(root: Path) -> BundleBuilder:
    """A base bundle whose rows are the ids of 2,000 generated records, hashed by ingestion's parser."""
    batch, rejected = JsonLinesParser(SCHEMA).parse(json_lines(PlantedModel(seed=11).sample(2000)))
    assert not rejected
    b = BundleBuilder(root, default_model().model_dump(mode="json"), schema=SCHEMA.model_dump(mode="json"))
    for spec in b.model.slots:
        b.push(spec.name, np.unique(batch.slots[spec.name][0]))
    items = np.unique(batch.slots["item_id"][0])
    vectors = np.random.default_rng(2).standard_normal((items.shape[0], b.model.tower_dim)).astype(np.float32)
    b.export("base", items=(items, vectors))
    return b


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    b = _quick_start_bundle(tmp_path_factory.mktemp("quick-start") / "exports")
    with started(make_settings(b.root)) as c:
        yield c


def _examples(where: dict[str, Any]) -> dict[str, Any]:
    return {name: example["value"] for name, example in where.get("examples", {}).items()}


def _non_empty(body: dict[str, Any]) -> bool:
    return any(isinstance(body.get(key), list) and body[key] for key in ("rows", "row", "scores", "items"))


def test_every_example_answers_200_with_a_result(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    sent = []
    for path in ("/v1/embeddings:lookup", "/v1/predict", "/v1/recommend", "/v1/search"):
        for name, value in _examples(paths[path]["post"]["requestBody"]["content"]["application/json"]).items():
            sent.append((f"POST {path} {name}", client.post(path, json=value)))
    row = {p["name"]: _examples(p) for p in paths["/v1/embeddings/{slot}/{id}"]["get"]["parameters"]}
    for slot in row["slot"].values():
        for id_ in row["id"].values():
            sent.append((f"GET row {slot}/{id_}", client.get(f"/v1/embeddings/{slot}/{id_}")))
    (item,) = [p for p in paths["/v1/items/{item_id}/similar"]["get"]["parameters"] if p["name"] == "item_id"]
    for name, value in _examples(item).items():
        sent.append((f"GET similar {name}", client.get(f"/v1/items/{value}/similar?raw={str(name == 'raw').lower()}")))
    failed = {what: r.text[:300] for what, r in sent if r.status_code != 200 or not _non_empty(r.json())}
    assert not failed, failed
    names = [what for what, _ in sent]
    # both forms on every endpoint that takes them: the generator's slots hash hex text, read back exactly
    for endpoint in ("embeddings:lookup", "predict", "recommend", "similar"):
        assert {"raw", "hashed"} <= {w.rsplit(" ", 1)[1] for w in names if endpoint in w}, names
    assert len(sent) == 10, names


def test_examples_name_the_served_slots_and_ids(client: TestClient) -> None:
    body = client.get("/openapi.json").json()["paths"]["/v1/predict"]["post"]["requestBody"]
    examples = _examples(body["content"]["application/json"])
    hashed = examples["hashed"]["instances"][0]["slots"]
    assert set(hashed) == {s.name for s in default_model().slots}
    raw = examples["raw"]["instances"][0]
    sparse = {name: v for name, v in raw.items() if name not in SCHEMA.dense_names}
    assert set(sparse) == set(hashed) and all(re.fullmatch("[0-9a-f]+", v) for v in sparse.values())


def test_without_a_bundle_the_fixed_examples_stay(tmp_path: Path) -> None:
    with TestClient(create_app(make_settings(tmp_path / "empty"))) as c:
        body = c.get("/openapi.json").json()["paths"]["/v1/recommend"]["post"]["requestBody"]
        assert set(body["content"]["application/json"]["examples"]) == {"raw", "hashed"}


def test_docs_pages_load_only_local_assets_that_answer(client: TestClient) -> None:
    for page in ("/docs", "/redoc"):
        r = client.get(page)
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
        urls = re.findall(r"""(?:src|href|spec-url)=["']([^"']+)["']|url: *["']([^"']+)["']""", r.text)
        urls = [a or b for a, b in urls]
        assert urls and all(u.startswith("/") and not u.startswith("//") for u in urls), (page, urls)
        for url in urls:
            got = client.get(url)
            assert got.status_code == 200 and got.content, (page, url, got.status_code)
        assert "cdn" not in r.text.lower() and "https://" not in r.text


def test_a_required_field_whose_values_cannot_be_known_leaves_no_raw_record(tmp_path: Path) -> None:
    """A raw user without its required `age` would be refused, and fnv1a ids do not give the value back:
    the user and record examples are hashed only, the lookup's raw values come from the int slot."""
    schema = SchemaConfig(
        format="json", user_id="user_id", item_id="movie_id",
        slots=(SlotConfig(name="user_id", kind=SlotKind.SPARSE, hash=HashKind.INT),
               SlotConfig(name="age", kind=SlotKind.SPARSE),  # fnv1a and required
               SlotConfig(name="movie_id", kind=SlotKind.SPARSE, hash=HashKind.INT)))
    model = {"type": "two_tower", "mlp": [8], "tower_dim": 8, "seed": 1,
             "slots": [{"name": "user_id", "dim": 8}, {"name": "age", "dim": 8},
                       {"name": "movie_id", "dim": 8, "tower": "item"}]}
    slot_ids = schema.slot_ids()

    def ids(slot: str, values: list[str], kind: HashKind) -> np.ndarray:
        return hash_strings(values, slot_id=slot_ids[slot], kind=kind)[0]

    b = BundleBuilder(tmp_path / "exports", model, schema=schema.model_dump(mode="json"))
    b.push("user_id", ids("user_id", ["7", "8"], HashKind.INT))
    b.push("age", ids("age", ["18-24"], HashKind.FNV1A))
    movies = ids("movie_id", [str(m) for m in range(1, 30)], HashKind.INT)
    b.push("movie_id", movies)
    b.export("base", items=(movies, np.random.default_rng(4).standard_normal((29, 8)).astype(np.float32)))
    with started(make_settings(b.root)) as client:
        paths = client.get("/openapi.json").json()["paths"]
        forms = {path: _examples(paths[path]["post"]["requestBody"]["content"]["application/json"])
                 for path in ("/v1/recommend", "/v1/predict", "/v1/embeddings:lookup")}
        assert {path: set(f) for path, f in forms.items()} == {
            "/v1/recommend": {"hashed"}, "/v1/predict": {"hashed"}, "/v1/embeddings:lookup": {"hashed", "raw"}}
        assert forms["/v1/embeddings:lookup"]["raw"]["slot"] == "user_id"
        assert sorted(forms["/v1/embeddings:lookup"]["raw"]["values"]) == [7, 8]  # every shard's ids
        for path, examples in forms.items():
            for value in examples.values():
                r = client.post(path, json=value)
                assert r.status_code == 200 and _non_empty(r.json()), (path, r.text)
