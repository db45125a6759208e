"""Deeply nested raw values: a field nested past the depth limit is a 422 naming the field and the
limit, a body nested past what the JSON decoder takes a 422 too (never a 500 and a traceback);
each is counted in streamrec_errors_total and the next request answers as before."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from exports.raw_records import MAX_VALUE_DEPTH, nested_past

from .service_support import make_settings, started
from .test_raw_values import RAW_USER, SCHEMA, _bundle, _invalid_inputs


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    b = _bundle(tmp_path_factory.mktemp("nesting") / "exports", SCHEMA.model_dump(mode="json"))
    with started(make_settings(b.root)) as c:
        yield c


def _nested(depth: int) -> str:
    return "[" * depth + '"Comedy"' + "]" * depth


def _post(client: TestClient, path: str, body: str) -> object:
    return client.post(path, content=body, headers={"content-type": "application/json"})


@pytest.mark.parametrize("depth", [MAX_VALUE_DEPTH + 1, 955])
@pytest.mark.parametrize(("path", "template", "field"), [
    ("/v1/predict", '{"instances": [{"user_id": 3}, {"user_id": 4, "genres": %s}]}', "instances[1].genres"),
    ("/v1/recommend", '{"user": {"user_id": 3, "genres": %s}, "k": 5}', "user.genres"),
])
def test_a_value_nested_past_the_limit_is_422_naming_the_field(client: TestClient, path: str, template: str,
                                                               field: str, depth: int) -> None:
    before = client.post("/v1/recommend", json={"user": RAW_USER, "k": 5}).json()["items"]
    refused = _invalid_inputs(client)
    r = _post(client, path, template % _nested(depth))
    assert r.status_code == 422, r.text
    err = r.json()["error"]
    assert err["code"] == "invalid_input" and err["message"].startswith(f"{field}: ")
    assert f"more than {MAX_VALUE_DEPTH} levels" in err["message"]
    assert err["detail"] == {"field": field, "max_depth": MAX_VALUE_DEPTH}
    assert _invalid_inputs(client) == refused + 1
    assert client.post("/v1/recommend", json={"user": RAW_USER, "k": 5}).json()["items"] == before


def test_a_body_nested_past_the_decoder_is_422(client: TestClient) -> None:
    before = client.post("/v1/recommend", json={"user": RAW_USER, "k": 5}).json()["items"]
    refused = _invalid_inputs(client)
    for path, template in (("/v1/predict", '{"instances": [{"genres": %s}]}'),
                           ("/v1/embeddings:lookup", '{"slot": "genres", "values": [%s]}')):
        r = _post(client, path, template % _nested(100_000))
        assert r.status_code == 422, r.text
        assert "nested too deeply" in r.json()["error"]["message"]
    assert _invalid_inputs(client) == refused + 2
    assert client.post("/v1/recommend", json={"user": RAW_USER, "k": 5}).json()["items"] == before


def test_values_within_the_limit_reach_the_parser() -> None:
    assert not nested_past("Comedy", 0) and not nested_past([], 1) and not nested_past(["a", 1], 1)
    assert nested_past([["a"]], 1) and not nested_past([["a"]], 2)
    assert nested_past({"a": [1]}, 1) and not nested_past({"a": [1]}, 2)
    deep: object = "x"
    for _ in range(10_000):  # far past the interpreter's recursion limit: walked level by level
        deep = [deep]
    assert nested_past(deep, MAX_VALUE_DEPTH) and not nested_past(deep, 10_000)
