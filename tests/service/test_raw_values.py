"""Raw field values at the API: a record's own values, hashed with the schema the bundle
carries, give exactly the answer of the same request in hashed ids, on every endpoint that takes
features; bad raw input is a 422 naming the field, an absent required field or item too, and an
absent optional field is named in the answer as a default; a bundle without a schema still serves
hashed ids and refuses raw values with a clear error."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from logrecords.hashing import hash_strings
from logrecords.schema_config import HashKind, SchemaConfig, SlotConfig, SlotKind

from .service_support import BundleBuilder, make_settings, started

SCHEMA = SchemaConfig(
    format="json", label="liked", event_time="ts", user_id="user_id", item_id="movie_id",
    slots=(SlotConfig(name="user_id", kind=SlotKind.SPARSE, hash=HashKind.INT),
           SlotConfig(name="age", kind=SlotKind.SPARSE, optional=True),
           SlotConfig(name="price", kind=SlotKind.DENSE, optional=True),
           SlotConfig(name="movie_id", kind=SlotKind.SPARSE, hash=HashKind.INT, slot_id=7),
           SlotConfig(name="genres", kind=SlotKind.SPARSE, separator="|", optional=True),
           SlotConfig(name="tag", kind=SlotKind.SPARSE, hash=HashKind.HEX, optional=True)),
)
MODEL = {
    "type": "two_tower", "n_dense": 1, "mlp": [16], "tower_dim": 8, "seed": 5,
    "slots": [{"name": "user_id", "dim": 8}, {"name": "age", "dim": 8}, {"name": "tag", "dim": 8},
              {"name": "movie_id", "dim": 16, "tower": "item"}, {"name": "genres", "dim": 16, "tower": "item"}],
}
SLOT_IDS = SCHEMA.slot_ids()
KINDS = {s.name: s.hash for s in SCHEMA.sparse_slots}
AGES = ["18-24", "25-34", "35-44", "Ünder 18"]
GENRES = ["Comedy", "Drama", "Action"]
MOVIES = list(range(1, 61))


def ids(slot: str, values: list[Any]) -> list[int]:
    """The hashed ids, straight from the hashing kernel (the reference for this test)."""
    out, ok = hash_strings([str(v) for v in values], slot_id=SLOT_IDS[slot], kind=KINDS[slot])
    assert ok.all()
    return [int(i) for i in out]


def _bundle(root: Path, schema: dict | None) -> BundleBuilder:
    b = BundleBuilder(root, MODEL, schema=schema)
    b.push("user_id", np.array(ids("user_id", list(range(1, 300))), np.uint64))
    b.push("age", np.array(ids("age", AGES), np.uint64))
    b.push("tag", np.array(ids("tag", ["ff", "1a2b"]), np.uint64))
    b.push("movie_id", np.array(ids("movie_id", MOVIES), np.uint64))
    b.push("genres", np.array(ids("genres", GENRES), np.uint64))
    vectors = np.random.default_rng(3).standard_normal((len(MOVIES), MODEL["tower_dim"])).astype(np.float32)
    b.export("base", items=(np.array(ids("movie_id", MOVIES), np.uint64), vectors))
    return b


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    b = _bundle(tmp_path_factory.mktemp("raw") / "exports", SCHEMA.model_dump(mode="json"))
    with started(make_settings(b.root)) as c:
        yield c


def ok(r: Any) -> dict[str, Any]:
    assert r.status_code == 200, r.text
    return r.json()


RAW_USER = {"user_id": 259 % 299, "age": "Ünder 18", "price": 3.5, "tag": "1a2b"}
HASHED_USER = {"dense": [3.5], "slots": {"user_id": ids("user_id", [259 % 299]), "age": ids("age", ["Ünder 18"]),
                                         "tag": ids("tag", ["1a2b"])}}


def test_predict_raw_equals_hashed(client: TestClient) -> None:
    raw = [{**RAW_USER, "movie_id": 12, "genres": ["Comedy", "Drama"]},
           {"user_id": "17", "movie_id": 3, "genres": "Action|Comedy|"},  # CSV-style joined list, int as text
           {"user_id": 5, "movie_id": 9, "age": "25-34", "ts": 1700000000, "liked": 1}]
    hashed = [{**HASHED_USER, "slots": {**HASHED_USER["slots"], "movie_id": ids("movie_id", [12]),
                                        "genres": ids("genres", ["Comedy", "Drama"])}},
              {"slots": {"user_id": ids("user_id", [17]), "movie_id": ids("movie_id", [3]),
                         "genres": ids("genres", ["Action", "Comedy"])}},
              {"dense": [0.0], "slots": {"user_id": ids("user_id", [5]), "movie_id": ids("movie_id", [9]),
                                         "age": ids("age", ["25-34"])}, "label": 1}]
    want = ok(client.post("/v1/predict", json={"instances": hashed}))["scores"]
    answer = ok(client.post("/v1/predict", json={"instances": raw}))
    assert answer["scores"] == want
    # the optional fields each record lacked were scored with their defaults, and the answer says so
    assert answer["defaults"] == {"instances[1]": ["price", "age", "tag"], "instances[2]": ["price", "genres", "tag"]}
    mixed = ok(client.post("/v1/predict", json={"instances": [raw[0], hashed[1], raw[2]]}))["scores"]
    assert mixed == want


MOVIE_OF = {i: m for m, i in zip(MOVIES, ids("movie_id", MOVIES), strict=True)}


def with_values(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A hashed answer's items as a raw request gets them: each with the movie behind its id."""
    return [{"id": i["id"], "value": MOVIE_OF[i["id"]], "score": i["score"]} for i in items]


def test_recommend_raw_equals_hashed(client: TestClient) -> None:
    want = ok(client.post("/v1/recommend", json={"user": HASHED_USER, "k": 8}))["items"]
    assert all("value" not in i for i in want)  # ids asked, ids answered
    assert ok(client.post("/v1/recommend", json={"user": RAW_USER, "k": 8}))["items"] == with_values(want)
    assert {i["id"] for i in want} <= set(ids("movie_id", MOVIES))
    # exclude by the item field's own values = exclude by item ids
    first = [MOVIE_OF[i["id"]] for i in want[:3]]
    by_values = ok(client.post("/v1/recommend", json={"user": RAW_USER, "k": 5, "exclude_values": first}))["items"]
    by_ids = ok(client.post("/v1/recommend", json={"user": HASHED_USER, "k": 5,
                                                    "exclude": ids("movie_id", first)}))["items"]
    assert by_values == with_values(by_ids) == with_values(want[3:8])


def test_similar_raw_equals_hashed(client: TestClient) -> None:
    (item,) = ids("movie_id", [42])
    want = ok(client.get(f"/v1/items/{item}/similar?k=5"))
    assert ok(client.get("/v1/items/42/similar?k=5&raw=true")) == {**want, "items": with_values(want["items"])}
    assert len(want["items"]) == 5 and item not in {i["id"] for i in want["items"]}


def test_lookup_raw_equals_hashed(client: TestClient) -> None:
    for slot, values in (("age", [*AGES, "never seen"]), ("user_id", [5, "6", 7]), ("tag", ["FF", "ff"]),
                         ("genres", GENRES)):
        want = ok(client.post("/v1/embeddings:lookup", json={"slot": slot, "ids": ids(slot, values)}))
        found = set(want["ids"])
        assert ok(client.post("/v1/embeddings:lookup", json={"slot": slot, "values": values})) == {
            **want, "values": [v for v, i in zip(values, ids(slot, values), strict=True) if i in found],
            "missing_values": [v for v, i in zip(values, ids(slot, values), strict=True) if i not in found]}
    assert ok(client.post("/v1/embeddings:lookup", json={"slot": "age", "values": ["never seen"]}))["missing"]


BAD_RAW = [  # (endpoint, body or path, the field the error must name)
    ("predict", {"instances": [{"user_id": 1}, {"user_id": 2, "agee": "18-24"}]}, "instances[1].agee"),
    ("predict", {"instances": [{"age": 18.5}]}, "'age'"),  # a float is no sparse value
    ("predict", {"instances": [{"age": True}]}, "'age'"),
    ("predict", {"instances": [{"genres": [["Comedy"]]}]}, "'genres'"),  # nested list
    ("predict", {"instances": [{"price": "cheap"}]}, "'price'"),  # text in a dense field
    ("predict", {"instances": [{"user_id": "abc"}]}, "'user_id'"),  # not an int
    ("predict", {"instances": [{"user_id": 1 << 56}]}, "'user_id'"),  # past the slot's 56 bits
    ("predict", {"instances": [{"user_id": -3}]}, "'user_id'"),
    ("predict", {"instances": [{"tag": "xyz"}]}, "'tag'"),  # not hex
    ("predict", {"instances": [{"liked": 7, "user_id": 1}]}, "'liked'"),  # label outside [0, 1]
    ("predict", {"instances": [{"slots": {"user_id": ids("age", ["18-24"])}}]}, "instances[0].slots.user_id"),
    ("recommend", {"user": {"user_id": 1, "zip": "10001"}}, "user.zip"),
    ("recommend", {"user": {"age": "18-24"}}, "user.user_id"),  # a required field absent
    ("predict", {"instances": [{"user_id": 1, "movie_id": 2}, {"user_id": 1}]}, "instances[1].movie_id"),
    ("predict", {"instances": [{"slots": {"user_id": ids("user_id", [1])}}]}, "instances[0].slots.movie_id"),
    ("recommend", {"user": {"age": {"min": 18}}}, "'age'"),
    ("recommend", {"user": {"slots": {"age": ids("user_id", [3])}}}, "user.slots.age"),
    ("recommend", {"user": {"user_id": 1}, "exclude_values": ["x1"]}, "exclude_values[0]"),
    ("lookup", {"slot": "age", "values": [1.5]}, "values"),
    ("lookup", {"slot": "user_id", "values": [1, "x"]}, "values[1]"),
    ("lookup", {"slot": "user_id", "ids": ids("movie_id", [3])}, "ids"),
    ("lookup", {"slot": "age", "ids": [1], "values": ["18-24"]}, "exactly one of ids"),
    ("similar", "/v1/items/abc/similar?raw=true", "item_id"),
    ("similar", f"/v1/items/{1 << 60}/similar?raw=true", "item_id"),
    ("similar", f"/v1/items/{ids('user_id', [4])[0]}/similar", "item_id"),  # a user id, not an item id
    ("similar", "/v1/items/Comedy/similar", "item_id"),
]
PATHS = {"predict": "/v1/predict", "recommend": "/v1/recommend", "lookup": "/v1/embeddings:lookup"}


@pytest.mark.parametrize(("endpoint", "request_", "field"), BAD_RAW)
def test_bad_raw_input_is_422_naming_the_field(client: TestClient, endpoint: str, request_: Any, field: str) -> None:
    before = ok(client.post("/v1/recommend", json={"user": RAW_USER, "k": 5}))["items"]
    refused = _invalid_inputs(client)
    r = client.get(request_) if endpoint == "similar" else client.post(PATHS[endpoint], json=request_)
    assert r.status_code == 422, r.text
    err = r.json()["error"]
    assert err["code"] == "invalid_input"
    assert field in err["message"], err
    assert _invalid_inputs(client) == refused + 1, "each refusal is counted"
    assert ok(client.post("/v1/recommend", json={"user": RAW_USER, "k": 5}))["items"] == before, "nothing else lost"


def _invalid_inputs(client: TestClient) -> float:
    line = next((x for x in client.get("/metrics").text.splitlines()
                 if x.startswith('streamrec_errors_total{code="invalid_input"}')), None)
    return 0.0 if line is None else float(line.split()[-1])


def test_bundle_without_schema_serves_hashed_ids_and_refuses_raw_values(tmp_path: Path) -> None:
    b = _bundle(tmp_path / "exports", None)
    with started(make_settings(b.root)) as c:
        assert ok(c.post("/v1/recommend", json={"user": HASHED_USER, "k": 3}))["items"]
        assert ok(c.post("/v1/embeddings:lookup", json={"slot": "age", "ids": ids("age", AGES)}))["ids"]
        for r in (c.post("/v1/recommend", json={"user": RAW_USER}),
                  c.post("/v1/predict", json={"instances": [RAW_USER]}),
                  c.post("/v1/embeddings:lookup", json={"slot": "age", "values": AGES}),
                  c.get("/v1/items/42/similar?raw=true")):
            assert r.status_code == 422, r.text
            assert "record schema" in r.json()["error"]["message"]


def test_openapi_shows_raw_examples_that_answer(client: TestClient) -> None:
    """The examples come from the served bundle (service.openapi_examples): raw values read back
    from ids of int and hex slots; `age` and `genres` are fnv1a and optional, so raw records
    leave them out."""
    paths = client.get("/openapi.json").json()["paths"]
    for path in ("/v1/recommend", "/v1/predict", "/v1/embeddings:lookup"):
        examples = paths[path]["post"]["requestBody"]["content"]["application/json"]["examples"]
        assert set(examples) == {"raw", "hashed"}, path
        assert ok(client.post(path, json=examples["raw"]["value"])), path
        assert "age" not in json.dumps(examples["raw"]["value"]), examples["raw"]
    params = {p["name"]: p for p in paths["/v1/items/{item_id}/similar"]["get"]["parameters"]}
    assert set(params["item_id"]["examples"]) == {"raw", "hashed"} and "raw" in params
    raw_item = params["item_id"]["examples"]["raw"]["value"]
    assert raw_item.isdigit() and ok(client.get(f"/v1/items/{raw_item}/similar?raw=true"))["items"]  # an int slot
