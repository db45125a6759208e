"""Lookups return exactly the exported rows, report unknown ids, and follow tombstones."""

from __future__ import annotations

import numpy as np

from ps.routing import shard_of, shard_of_key
from service.settings import LimitSettings

from .service_support import ITEM_IDS, USER_IDS, auth, make_settings, started, wait_until


def _lookup(client, slot, ids):
    r = client.post("/v1/embeddings:lookup", json={"slot": slot, "ids": [int(i) for i in ids]})
    assert r.status_code == 200, r.text
    return r.json()


def test_lookup_returns_exactly_the_exported_rows(client, builder) -> None:
    unknown = np.array([7, (1 << 64) - 1, 0], np.uint64)
    ids = np.concatenate([USER_IDS[:50], unknown, USER_IDS[1000:1010]])
    body = _lookup(client, "user", ids)
    found, rows = builder.expected("user", ids)
    assert body["version"] == 1 and body["table"] == "emb8"
    assert body["ids"] == [int(i) for i in ids[found]]
    assert body["missing"] == [int(i) for i in unknown]
    assert np.array_equal(np.array(body["rows"], np.float32), rows)
    # duplicates are answered per occurrence, in request order
    a, b = int(USER_IDS[5]), int(USER_IDS[6])
    dup = _lookup(client, "user", [a, b, 7, a, b])
    assert dup["ids"] == [a, b, a, b] and dup["missing"] == [7]
    assert dup["rows"][0] == dup["rows"][2] == body["rows"][5] and dup["rows"][1] == body["rows"][6]
    # the same through the table name, and the item slot's own table
    assert _lookup(client, "emb8", ids)["rows"] == body["rows"]
    item = _lookup(client, "item", ITEM_IDS[:5])
    assert item["table"] == "emb16" and np.array_equal(np.array(item["rows"], np.float32),
                                                        builder.expected("item", ITEM_IDS[:5])[1])


def test_single_row_and_unknown_id(client, builder) -> None:
    i = int(USER_IDS[3])
    r = client.get(f"/v1/embeddings/user/{i}")
    assert r.status_code == 200
    assert r.json() | {"row": None} == {"version": 1, "slot": "user", "table": "emb8", "wide": True, "id": i,
                                        "row": None}
    assert np.array_equal(np.array(r.json()["row"], np.float32), builder.expected("user", [i])[1][0])
    r = client.get(f"/v1/embeddings/user/{(1 << 64) - 1}")
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    assert str((1 << 64) - 1) in r.json()["error"]["message"]


def test_single_rows_come_from_the_right_shard(client, builder) -> None:
    """The single-id path routes in plain ints (ps.routing.shard_of_key): every id of both
    shards reads as the batch lookup does."""
    keys = np.random.default_rng(3).integers(0, 2**64, 2000, dtype=np.uint64)
    for n in (1, 2, 3, 7):
        assert [shard_of_key(int(k), n) for k in keys] == shard_of(keys, n).tolist()
    ids = USER_IDS[:40]
    assert set(shard_of(ids, 2).tolist()) == {0, 1}
    batch = _lookup(client, "user", ids)["rows"]
    assert [client.get(f"/v1/embeddings/user/{int(i)}").json()["row"] for i in ids] == batch


def test_bad_single_row_paths_name_the_parameter(client) -> None:
    for path, field in ((f"/v1/embeddings/user/{1 << 64}", "path.id"), ("/v1/embeddings/user/-1", "path.id"),
                        ("/v1/embeddings/user/abc", "path.id"), ("/v1/embeddings/user/%C3%A9", "path.id"),
                        (f"/v1/embeddings/{'s' * 201}/1", "path.slot")):
        r = client.get(path)
        assert r.status_code == 422, path
        err = r.json()["error"]
        assert err["code"] == "invalid_input" and err["detail"]["fields"] == [field], err
    assert client.get("/v1/embeddings/nope/1").status_code == 404
    params = client.get("/openapi.json").json()["paths"]["/v1/embeddings/{slot}/{id}"]["get"]["parameters"]
    assert [(p["name"], p["in"]) for p in params] == [("slot", "path"), ("id", "path")]


def test_evicted_id_disappears_once_its_tombstone_delta_is_applied(client, builder) -> None:
    gone = USER_IDS[:20]
    assert _lookup(client, "user", gone)["missing"] == []
    builder.push("user", USER_IDS[500:600])  # changed rows ride along in the same delta
    builder.evict_all_of("user", gone)
    builder.export("delta")
    wait_until(lambda: client.get("/readyz").json().get("version") == 2, what="delta 2")
    body = _lookup(client, "user", np.concatenate([gone, USER_IDS[500:600]]))
    assert body["missing"] == [int(i) for i in gone]
    assert np.array_equal(np.array(body["rows"], np.float32), builder.expected("user", USER_IDS[500:600])[1])
    status = client.get("/admin/status", headers=auth()).json()["bundle"]
    assert status["version"] == 2 and status["tables"]["emb8"] == USER_IDS.shape[0] - gone.shape[0]


def test_bad_lookups_name_what_was_wrong(client) -> None:
    cases = [
        ({"slot": "user", "ids": [-1]}, "ids.0"),
        ({"slot": "user", "ids": [1 << 64]}, "ids.0"),
        ({"slot": "user", "ids": ["abc"]}, "ids.0"),
        ({"slot": "user", "ids": []}, "ids"),
        ({"slot": "user"}, "ids"),
        ({"slot": "user", "ids": [1], "extra": 1}, "extra"),
    ]
    for body, field in cases:
        r = client.post("/v1/embeddings:lookup", json=body)
        assert r.status_code == 422, body
        err = r.json()["error"]
        assert err["code"] == "invalid_input" and field in err["message"], err
    r = client.post("/v1/embeddings:lookup", json={"slot": "nope", "ids": [1]})
    assert r.status_code == 404 and "nope" in r.json()["error"]["message"]
    r = client.post("/v1/embeddings:lookup", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_input"


def test_limits_answer_422_and_are_counted(builder, tmp_path) -> None:
    settings = make_settings(builder.root, limits=LimitSettings(max_ids=100, max_k=5, max_body_bytes=4096))
    with started(settings) as client:
        r = client.post("/v1/embeddings:lookup", json={"slot": "user", "ids": list(range(101))})
        assert r.status_code == 422 and "limit of 100" in r.json()["error"]["message"]
        r = client.get(f"/v1/items/{int(ITEM_IDS[0])}/similar", params={"k": 6})
        assert r.status_code == 422 and "limit of 5" in r.json()["error"]["message"]
        r = client.post("/v1/embeddings:lookup", content=b"[" + b"1," * 5000 + b"1]",
                        headers={"content-type": "application/json"})
        assert r.status_code == 422 and "4096 bytes" in r.json()["error"]["message"]
        chunked = iter([b'{"slot": "user", "ids": [', b"1, " * 3000, b"1]}"])  # no content-length to trust
        r = client.post("/v1/embeddings:lookup", content=chunked, headers={"content-type": "application/json"})
        assert r.status_code == 422 and "exceeds 4096 bytes" in r.json()["error"]["message"]
        # and nothing else was lost: the service still answers
        assert client.post("/v1/embeddings:lookup", json={"slot": "user", "ids": [1]}).status_code == 200
        metrics = client.get("/metrics").text
        assert 'streamrec_errors_total{code="invalid_input"} 4' in metrics
