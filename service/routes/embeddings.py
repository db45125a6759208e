"""Embedding lookups: exactly the served rows; unknown ids are reported, never invented.

A lookup names feature ids (``ids``) or the field's own values (``values``: ``{"slot": "age",
"values": ["18-24"]}``), hashed with the bundle's schema as ingestion hashes that field.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import numpy as np
from fastapi import APIRouter, Body, Path, Request, Response
from pydantic import BaseModel, Field, StrictInt, StrictStr, model_validator

from core.errors import InvalidInput, NotFound
from service.deps import LimitsDep, StoreDep
from service.json_rows import rows_json
from service.model_store import Side
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


class RowResponse(BaseModel):
    version: int
    slot: str
    table: str
    wide: bool
    id: U64
    row: list[float]


def _rows_response(head: dict[str, Any], key: str, rows: bytes, tail: dict[str, Any]) -> Response:
    """``head`` + ``key: rows`` (already JSON, see service.json_rows) + ``tail``, as one JSON object."""
    parts = [json.dumps(head, separators=(",", ":"))[:-1].encode(), b',"', key.encode(), b'":', rows]
    if tail:
        parts.append(b"," + json.dumps(tail, separators=(",", ":"))[1:].encode())
    else:
        parts.append(b"}")
    return Response(b"".join(parts), media_type="application/json")


@router.post("/v1/embeddings:lookup", response_model=LookupResponse, summary="Rows of up to max_ids ids")
async def lookup(body: Annotated[LookupRequest, Body(openapi_examples=LOOKUP_EXAMPLES)], store: StoreDep,
                 limits: LimitsDep, request: Request) -> Response:
    what = "ids" if body.ids is not None else "values"
    if body.count > limits.max_ids:
        raise InvalidInput(f"{what}: {body.count} {what} exceed the limit of {limits.max_ids} per request",
                           detail={"max_ids": limits.max_ids})
    with store.read() as side:
        table, shards = side.table_of(body.slot)
        ids = _ids_of(side, body)
        found, rows = side.lookup(body.slot, ids)
        version = side.version
    # read from app.state, not a dependency: one dependency less on the hottest route
    if (live := request.app.state.read_through) is not None:
        found, rows = live.merge(table, ids, found, rows)
    return _rows_response({"version": version, "slot": body.slot, "table": table, "wide": shards[0].config.wide,
                           "ids": ids[found].tolist()}, "rows", rows_json(rows), {"missing": ids[~found].tolist()})


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


@router.get("/v1/embeddings/{slot}/{id}", response_model=RowResponse, summary="The row of one id")
async def get_row(slot: Annotated[str, Path(max_length=200)], id: Annotated[int, Path(ge=0, le=(1 << 64) - 1)],
                  store: StoreDep, request: Request) -> Response:
    ids = np.array([id], dtype=np.uint64)
    with store.read() as side:
        table, shards = side.table_of(slot)
        found, rows = side.lookup(slot, ids)
        version = side.version
    if (live := request.app.state.read_through) is not None:
        found, rows = live.merge(table, ids, found, rows)
    if not found[0]:
        raise NotFound(f"id {id} has no row in slot {slot!r} (bundle {version})",
                       detail={"slot": slot, "id": id, "version": version})
    return _rows_response({"version": version, "slot": slot, "table": table, "wide": shards[0].config.wide, "id": id},
                          "row", rows_json(rows)[1:-1], {})
