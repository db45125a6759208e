"""Embedding lookups: exactly the served rows; unknown ids are reported, never invented.

A lookup names feature ids (``ids``) or the field's own values (``values``: ``{"slot": "age",
"values": ["18-24"]}``), hashed with the bundle's schema as ingestion hashes that field.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from typing import Annotated, Any

import numpy as np
from fastapi import APIRouter, Body, Request, Response
from fastapi.routing import APIRoute
from pydantic import BaseModel, Field, StrictInt, StrictStr, model_validator

from core.errors import InvalidInput, NotFound
from service.json_rows import rows_json
from service.model_store import Side, existing_rows
from service.schemas import ERROR_RESPONSES, U64, Strict

router = APIRouter(tags=["embeddings"], responses=ERROR_RESPONSES)


class LookupRequest(Strict):
    slot: str = Field(min_length=1, max_length=200, description="a slot of the model, or a table name")
    ids: list[U64] | None = Field(None, min_length=1, description="feature ids (at most the service's max_ids)")
    values: list[StrictStr | StrictInt] | None = Field(
        None, min_length=1, description="the field's own values, instead of ids (hashed with the bundle's schema)")

    @model_validator(mode="after")
    def _one_of(self) -> LookupRequest:
        if (self.ids is None) == (self.values is None):
            raise ValueError("give exactly one of ids (feature ids) and values (the field's own values)")
        return self

    @property
    def count(self) -> int:
        return len(self.ids if self.ids is not None else self.values or ())


LOOKUP_EXAMPLES: dict[str, Any] = {
    "raw": {"summary": "the field's own values (bundles with a schema)", "value": {"slot": "user_id", "values": [259]}},
    "hashed": {"summary": "feature ids", "value": {"slot": "user_id", "ids": [259]}},
}


class LookupResponse(BaseModel):
    version: int
    slot: str
    table: str
    wide: bool = Field(description="rows start with the wide (linear) weight, then the embedding")
    ids: list[U64] = Field(description="the ids found, in request order")
    rows: list[list[float]] = Field(description="one row per found id")
    missing: list[U64] = Field(description="ids with no row in the served bundle")
    values: list[str | int] | None = Field(None, description="with `values` asked: the value of each found id")
    missing_values: list[str | int] | None = Field(None, description="with `values` asked: the value of each "
                                                                     "missing id")


class RowResponse(BaseModel):
    version: int
    slot: str
    table: str
    wide: bool
    id: U64
    row: list[float]


def _rows_response(head: dict[str, Any], key: str, rows: bytes, tail: dict[str, Any]) -> Response:
    """``head`` + ``key: rows`` (already JSON, see service.json_rows) + ``tail``, as one JSON object."""
    parts = [json.dumps(head, separators=(",", ":"))[:-1].encode(), b',"', key.encode(), b'":', rows,
             b"," + json.dumps(tail, separators=(",", ":"))[1:].encode()]
    return Response(b"".join(parts), media_type="application/json")


@router.post("/v1/embeddings:lookup", response_model=LookupResponse, summary="Rows of up to max_ids ids")
async def lookup(body: Annotated[LookupRequest, Body(openapi_examples=LOOKUP_EXAMPLES)], request: Request) -> Response:
    # the store and limits from app.state, not dependencies: each dependency costs ~10 us per request
    store, limits = request.app.state.store, request.app.state.settings.limits
    what = "ids" if body.ids is not None else "values"
    if body.count > limits.max_ids:
        raise InvalidInput(f"{what}: {body.count} {what} exceed the limit of {limits.max_ids} per request",
                           detail={"max_ids": limits.max_ids})
    with store.read() as side:
        table, shards = side.table_of(body.slot)
        ids = _ids_of(side, body)
        found, rows = side.lookup(body.slot, ids)
        version = side.version
    if (live := request.app.state.read_through) is not None:
        found, rows = live.merge(table, ids, found, rows)
    tail: dict[str, Any] = {"missing": ids[~found].tolist()}
    if body.values is not None:  # raw values asked: each id answered beside its value
        tail["values"] = [v for v, f in zip(body.values, found.tolist(), strict=True) if f]
        tail["missing_values"] = [v for v, f in zip(body.values, found.tolist(), strict=True) if not f]
    return _rows_response({"version": version, "slot": body.slot, "table": table, "wide": shards[0].config.wide,
                           "ids": ids[found].tolist()}, "rows", rows_json(rows), tail)


def _ids_of(side: Side, body: LookupRequest) -> np.ndarray:
    if body.values is None:
        ids = np.array(body.ids, dtype=np.uint64)
        if side.records is not None:
            side.records.check_ids(body.slot, ids, "ids")
        return ids
    if side.records is None:
        raise InvalidInput(f"values: raw values need a bundle with the record schema; bundle {side.version} has none "
                           "(exported before schemas were): send feature ids as ids", detail={"field": "values"})
    return side.records.values(body.slot, body.values, "values")


_ROW_PARAMETERS = [
    {"name": "slot", "in": "path", "required": True, "description": "a slot of the model, or a table name",
     "schema": {"type": "string", "maxLength": 200, "title": "Slot"}},
    {"name": "id", "in": "path", "required": True, "description": "a feature id",
     "schema": {"type": "integer", "minimum": 0, "maximum": (1 << 64) - 1, "title": "Id"}},
]


class _DirectRoute(APIRoute):
    """A route whose endpoint takes the request and returns the response itself: FastAPI's
    parameter, dependency and response-model machinery is skipped (it cost more CPU than the
    lookup), while the route keeps its OpenAPI entry."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        return self.endpoint


def _path_params(request: Request) -> tuple[str, int]:
    """``slot`` and ``id`` of the path, checked as their declared OpenAPI schema says."""
    params = request.path_params
    slot, text = params["slot"], params["id"]
    if len(slot) > 200:
        raise InvalidInput("invalid request: path.slot: String should have at most 200 characters",
                           detail={"fields": ["path.slot"]})
    if not (text.isascii() and text.isdigit()) or len(text) > 20 or int(text) >= 1 << 64:
        raise InvalidInput(f"invalid request: path.id: an integer in [0, 2^64) expected, got {text[:40]!r}",
                           detail={"fields": ["path.id"]})
    return slot, int(text)


async def get_row(request: Request) -> Response:
    """The row of one id (the hot single lookup: see _DirectRoute)."""
    slot, id = _path_params(request)
    ids = np.array([id], dtype=np.uint64)
    with request.app.state.store.read() as side:
        table, shards = side.table_of(slot)
        found, rows = existing_rows(shards, ids)
        version = side.version
    if (live := request.app.state.read_through) is not None:
        found, rows = live.merge(table, ids, found, rows)
    if not found[0]:
        raise NotFound(f"id {id} has no row in slot {slot!r} (bundle {version})",
                       detail={"slot": slot, "id": id, "version": version})
    wide = "true" if shards[0].config.wide else "false"
    head = f'{{"version":{version},"slot":{json.dumps(slot)},"table":{json.dumps(table)},"wide":{wide},"id":{id},"row":'
    return Response(b"".join((head.encode(), rows_json(rows)[1:-1], b"}")), media_type="application/json")


router.add_api_route("/v1/embeddings/{slot}/{id}", get_row, methods=["GET"], response_model=RowResponse,
                     summary="The row of one id", openapi_extra={"parameters": _ROW_PARAMETERS},
                     route_class_override=_DirectRoute)
