"""Property-based run over the service's own OpenAPI schema: every operation gets bodies,
path and query values drawn from its schema (and plain junk); no request may meet a 500,
and every error has the one ``{"error": {code, message, detail}}`` shape."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .service_support import TOKEN

JUNK = st.recursive(st.none() | st.booleans() | st.integers(-(1 << 70), 1 << 70) | st.floats() | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
                    max_leaves=10)


class SchemaStrategies:
    """A JSON-schema subset (what FastAPI emits) to hypothesis strategies, boundaries included."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec

    def resolve(self, s: dict[str, Any]) -> dict[str, Any]:
        while "$ref" in s:
            node: Any = self.spec
            for part in s["$ref"].lstrip("#/").split("/"):
                node = node[part]
            s = node
        return s

    def of(self, s: dict[str, Any], depth: int = 0) -> st.SearchStrategy:
        s = self.resolve(s)
        if depth > 4:
            return JUNK
        for key in ("anyOf", "oneOf", "allOf"):
            if key in s:
                return st.one_of([self.of(sub, depth + 1) for sub in s[key]])
        if "const" in s:
            return st.just(s["const"])
        if "enum" in s:
            return st.sampled_from(s["enum"])
        t = s.get("type")
        if t == "integer":
            lo, hi = s.get("minimum", -(1 << 65)), s.get("maximum", 1 << 65)
            return st.integers(lo, hi) | st.sampled_from([lo - 1, hi + 1, lo, hi, 0])
        if t == "number":
            return st.floats(allow_nan=False, width=64) | st.sampled_from([1e39, -1e39, 0.0])
        if t == "string":
            return st.text(max_size=s.get("maxLength", 12) + 2)
        if t == "boolean":
            return st.booleans()
        if t == "null":
            return st.none()
        if t == "array":
            return st.lists(self.of(s.get("items", {}), depth + 1), max_size=min(s.get("maxItems", 6), 6))
        if t == "object" or "properties" in s:
            props = s.get("properties", {})
            required = set(s.get("required", ()))
            fixed = {k: self.of(v, depth + 1) for k, v in props.items() if k in required}
            optional = {k: self.of(v, depth + 1) for k, v in props.items() if k not in required}
            return st.fixed_dictionaries(fixed, optional=optional)
        return JUNK


def _operations(spec: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [(method.upper(), path, op) for path, ops in spec["paths"].items() for method, op in ops.items()]


@pytest.fixture(scope="module")
def fuzz_client(tmp_path_factory: pytest.TempPathFactory):
    import time

    import numpy as np

    from .service_support import ITEM_IDS, USER_IDS, BundleBuilder, make_settings, random_items, started

    b = BundleBuilder(tmp_path_factory.mktemp("fuzz") / "exports")
    b.push("user", USER_IDS)
    b.push("item", ITEM_IDS)
    b.export("base", items=random_items(np.random.default_rng(1), 300, 8), newest_record_time=time.time())
    with started(make_settings(b.root)) as c:
        yield c


@pytest.mark.slow
def test_no_operation_meets_a_500(fuzz_client: TestClient) -> None:
    spec = fuzz_client.get("/openapi.json").json()
    strategies = SchemaStrategies(spec)
    ops = _operations(spec)
    assert len(ops) >= 18
    statuses: Counter[int] = Counter()

    @settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
    @given(data=st.data())
    def run(data: st.DataObject) -> None:
        method, path, op = data.draw(st.sampled_from(ops))
        url, query = path, {}
        for p in op.get("parameters", []):
            value = data.draw(strategies.of(p.get("schema", {})) | JUNK.map(str))
            if p["in"] == "path":
                url = url.replace("{" + p["name"] + "}", quote(str(value), safe="") or "x")
            elif p["in"] == "query" and data.draw(st.booleans()):
                query[p["name"]] = value if not isinstance(value, dict | list) else str(value)
        body = None
        if "requestBody" in op:
            schema = op["requestBody"]["content"]["application/json"]["schema"]
            body = data.draw(strategies.of(schema) | JUNK)
        headers = data.draw(st.sampled_from([{}, {"Authorization": f"Bearer {TOKEN}"}, {"Authorization": "Bearer x"}]))
        if body is not None:  # Python's encoder, so NaN and Infinity reach the server too
            headers = {**headers, "content-type": "application/json"}
        content = None if body is None else json.dumps(body).encode()
        r = fuzz_client.request(method, url, params=query, content=content, headers=headers)
        statuses[r.status_code] += 1
        assert r.status_code != 500 and r.status_code < 600, (method, url, body, r.text)
        if r.status_code >= 400:
            err = r.json()["error"]
            assert set(err) == {"code", "message", "detail"} and err["message"], r.text

    run()
    assert statuses[200] >= 20 and statuses[422] >= 20, statuses  # both valid and invalid requests were made
    print(dict(statuses))
