"""Recommendations: the two-tower user vector, then the top-k items by inner product."""

from __future__ import annotations

import numpy as np
from fastapi import APIRouter, Response
from pydantic import Field

from service.deps import LimitsDep, StoreDep
from service.routes.items import check_k, items_of, run_search
from service.routes.predict import batch_of, finite_or_fail, predictor_of
from service.schemas import ERROR_RESPONSES, U64, Instance, ItemsResponse, Strict, json_response, scored

router = APIRouter(tags=["recommend"], responses=ERROR_RESPONSES)


class RecommendRequest(Strict):
    user: Instance = Field(description="the user's features (user-tower slots and dense inputs)")
    k: int = Field(10, ge=1)
    exclude: list[U64] = Field(default_factory=list, max_length=10_000, description="item ids never returned")


@router.post("/v1/recommend", response_model=ItemsResponse, summary="Top-k items for a user")
async def recommend(body: RecommendRequest, store: StoreDep, limits: LimitsDep) -> Response:
    # one user's tower is ~0.1 ms of numpy: inline; the search moves off the loop only when slow
    check_k(body.k, limits)
    with store.read() as side:
        items = items_of(side.items, side.version)
        predictor = predictor_of(side)
        user = finite_or_fail(predictor.user_vectors(batch_of(side, [body.user])), "user vector")
        exclude = np.array(body.exclude, np.uint64)
        ids, scores = await run_search(items, items.search, user, body.k + exclude.shape[0])
        version = side.version
    ids, scores = ids[0], scores[0]
    if exclude.shape[0]:
        keep = ~np.isin(ids, exclude)
        ids, scores = ids[keep], scores[keep]
    return json_response({"version": version, "items": scored(ids[: body.k], scores[: body.k])})
