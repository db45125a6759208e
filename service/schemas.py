"""Request/response shapes shared by several routers, and the fast JSON response."""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import Response
from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag

U64 = Annotated[int, Field(ge=0, le=(1 << 64) - 1, description="uint64 feature or item id")]
Finite = Annotated[float, Field(allow_inf_nan=False, ge=-3e38, le=3e38)]  # fits float32


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Instance(Strict):
    """One record as the model sees it: dense inputs and, per slot, final feature ids."""

    label: float | None = Field(None, ge=0.0, le=1.0)
    dense: list[Finite] = Field(default_factory=list, max_length=4096)
    slots: dict[str, list[U64]] = Field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"dense": self.dense, "slots": self.slots}
        if self.label is not None:
            d["label"] = self.label
        return d


# A record's own field values, hashed with the bundle's schema (exports.raw_records):
# {"user_id": 259, "age": "18-24", "genres": ["Comedy", "Drama"]}.
RawRecord = Annotated[dict[str, Any], Field(description="a record's own field values (the job's schema fields), "
                                                        "hashed as ingestion hashes them")]
_HASHED_KEYS = frozenset({"label", "dense", "slots"})


def _form(v: Any) -> str:
    """Hashed form when the object only has Instance's keys (an empty object too), else raw values."""
    if isinstance(v, dict) and v and not set(v) <= _HASHED_KEYS:
        return "values"
    return "ids"


# One record, in either form: hashed ids (Instance) or raw field values.
Record = Annotated[Annotated[Instance, Tag("ids")] | Annotated[RawRecord, Tag("values")], Discriminator(_form)]


class ScoredItem(BaseModel):
    id: U64
    value: str | int | None = Field(None, description="the item field's own value behind `id`, when the request "
                                                      "used raw values and the field's hash reads backwards "
                                                      "(`int`, `hex`)")
    score: float


class ItemsResponse(BaseModel):
    version: int
    items: list[ScoredItem]


class ErrorDetail(BaseModel):
    code: str = Field(description="stable machine-readable code (core.errors)")
    message: str = Field(description="what was wrong, naming the field, id or file")
    detail: dict[str, Any] = Field(description="structured context")


class ErrorBody(BaseModel):
    error: ErrorDetail


# Every router documents the one error shape for the statuses it can answer with.
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody, "description": text}
    for status, text in ((404, "unknown slot, id, item or table"), (422, "invalid input or over a limit"),
                         (503, "no bundle loaded yet, or the training job is unreachable"))
}
ADMIN_ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    **ERROR_RESPONSES, 401: {"model": ErrorBody, "description": "missing bearer token"},
    403: {"model": ErrorBody, "description": "wrong token, or the admin API is disabled"},
    409: {"model": ErrorBody, "description": "the job refused the operation in its current state"},
}


def json_response(obj: Any, status_code: int = 200) -> Response:
    """Pre-serialized JSON: skips FastAPI's response-model pass on hot endpoints (their
    documented shape is still the route's ``response_model``)."""
    return Response(json.dumps(obj, separators=(",", ":")).encode(), status_code=status_code,
                    media_type="application/json")


def scored(ids: Any, scores: Any, values: list[Any] | None = None) -> list[dict[str, Any]]:
    """``{"id", "score"}`` per item, and its field ``value`` where ``values`` knows it."""
    out = [{"id": i, "score": s} for i, s in zip(ids.tolist(), scores.tolist(), strict=True)]
    for item, value in zip(out, values or (), strict=False):
        if value is not None:
            item["value"] = value
    return out
