"""Similar items and vector search over the item index (inner product).

An item is its feature id, or with ``?raw=true`` the item field's own value (``/v1/items/1193/
similar?raw=true``), hashed with the bundle's schema as ingestion hashes the item field.
Similar items compare the item tower's vectors alone: a two_tower with ``retrieval.item_bias``
indexes one more column (temperature x the item's bias, for /v1/recommend's query [u, 1]), which
the similar-items query leaves at zero; ``/v1/search`` takes vectors of the index's full width.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Annotated, Any, TypeVar

import numpy as np
from fastapi import APIRouter, Path, Query, Response
from fastapi.concurrency import run_in_threadpool
from pydantic import Field

from core.errors import InvalidInput, Unavailable
from models.two_tower import prior_columns
from service.deps import LimitsDep, StoreDep
from service.model_store import Side
from service.schemas import ERROR_RESPONSES, Finite, ItemsResponse, Strict, json_response, scored
from service.settings import LimitSettings
from service.vector_index import ItemIndex

router = APIRouter(tags=["items"], responses=ERROR_RESPONSES)
T = TypeVar("T")

# An exact search over this many items takes milliseconds: run it off the event loop then.
_INLINE_FLAT_ITEMS = 100_000


def check_k(k: int, limits: LimitSettings) -> None:
    if k > limits.max_k:
        raise InvalidInput(f"k: {k} exceeds the limit of {limits.max_k}", detail={"max_k": limits.max_k})


def items_of(items: ItemIndex | None, version: int | None) -> ItemIndex:
    if items is None or items.size == 0:
        raise Unavailable(f"bundle {version} has no item vectors to search", detail={"version": version})
    return items


async def run_search(items: ItemIndex, fn: Callable[..., T], *args: Any) -> T:
    """Cheap searches (IVF, HNSW, small flat) inline; big exact ones in a worker thread."""
    if items.kind == "flat" and items.size > _INLINE_FLAT_ITEMS:
        return await run_in_threadpool(fn, *args)
    return fn(*args)


class SearchRequest(Strict):
    vector: list[Finite] = Field(min_length=1, max_length=4096)
    k: int = Field(10, ge=1)


def item_ids_of(side: Side, values: Sequence[str | int], where: str) -> np.ndarray:
    """Item ids of the item field's own values (``where``: the request field, named in errors)."""
    hasher = side.records
    if hasher is None:
        raise InvalidInput(f"{where}: raw item values need a bundle with the record schema; bundle {side.version} "
                           "has none (exported before schemas were): send hashed item ids", detail={"field": where})
    if hasher.schema.item_id is None:
        raise InvalidInput(f"{where}: the job's schema names no item_id field to hash item values with",
                           detail={"field": where})
    return hasher.values(hasher.schema.item_id, list(values), where)


def item_values(side: Side, ids: np.ndarray) -> list[str | int | None] | None:
    """The item field's value behind each item id, where the schema's hash reads backwards."""
    hasher = side.records
    if hasher is None or hasher.schema.item_id is None:
        return None
    return hasher.raw_values(hasher.schema.item_id, np.asarray(ids, np.uint64))


def _item_id(side: Side, item: str, raw: bool) -> int:
    if raw:
        return int(item_ids_of(side, [item], "item_id")[0])
    if not item.isascii() or not item.isdigit() or int(item) >= 1 << 64:
        raise InvalidInput(f"item_id: {item[:40]!r} is not a uint64 item id (for the item field's own value "
                           "add ?raw=true)", detail={"field": "item_id"})
    if side.records is not None and side.records.schema.item_id is not None:
        side.records.check_ids(side.records.schema.item_id, np.array([int(item)], np.uint64), "item_id")
    return int(item)


@router.get("/v1/items/{item_id}/similar", response_model=ItemsResponse, summary="Top-k items like this one")
async def similar(item_id: Annotated[str, Path(max_length=200, description="uint64 item id, or with raw=true the "
                                               "item field's own value", openapi_examples={
                                                   "hashed": {"summary": "item feature id",
                                                              "value": "72057594037929129"},
                                                   "raw": {"summary": "the item field's value (raw=true)",
                                                           "value": "1193"}})],
                  store: StoreDep, limits: LimitsDep, k: Annotated[int, Query(ge=1)] = 10,
                  raw: Annotated[bool, Query(description="item_id is the item field's own value, hashed with "
                                                         "the bundle's schema")] = False) -> Response:
    check_k(k, limits)
    with store.read() as side:
        items = items_of(side.items, side.version)
        prior = prior_columns(side.model) if side.model is not None else 0
        similar = partial(items.similar, prior_columns=prior)
        ids, scores = await run_search(items, similar, _item_id(side, item_id, raw), k)
        version = side.version
        values = item_values(side, ids) if raw else None
    return json_response({"version": version, "items": scored(ids, scores, values)})


@router.post("/v1/search", response_model=ItemsResponse, summary="Top-k items for a query vector")
async def search(body: SearchRequest, store: StoreDep, limits: LimitsDep) -> Response:
    check_k(body.k, limits)
    with store.read() as side:
        items = items_of(side.items, side.version)
        if len(body.vector) != items.dim:
            raise InvalidInput(f"vector: has {len(body.vector)} values, the item vectors have {items.dim}",
                               detail={"dim": items.dim})
        q = np.array(body.vector, np.float32).reshape(1, -1)
        ids, scores = await run_search(items, items.search, q, body.k)
        version = side.version
    return json_response({"version": version, "items": scored(ids[0], scores[0])})
