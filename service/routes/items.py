"""Similar items and vector search over the item index (inner product)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, TypeVar

import numpy as np
from fastapi import APIRouter, Path, Query, Response
from fastapi.concurrency import run_in_threadpool
from pydantic import Field

from core.errors import InvalidInput, Unavailable
from service.deps import LimitsDep, StoreDep
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


@router.get("/v1/items/{item_id}/similar", response_model=ItemsResponse, summary="Top-k items like this one")
async def similar(item_id: Annotated[int, Path(ge=0, le=(1 << 64) - 1)], store: StoreDep, limits: LimitsDep,
                  k: Annotated[int, Query(ge=1)] = 10) -> Response:
    check_k(k, limits)
    with store.read() as side:
        items = items_of(side.items, side.version)
        ids, scores = await run_search(items, items.similar, item_id, k)
        version = side.version
    return json_response({"version": version, "items": scored(ids, scores)})


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
