"""Recommendations: the two-tower user vector, then the top-k items by inner product.

The user is hashed ids or the user's own field values (see service.routes.predict); ``exclude``
takes item ids, or with ``exclude_values`` the item field's own values. When the job keeps
user histories, a request without one is served with the user's latest (service.user_history).
A user none of whose ids has a row gets the items most liked lately (service.cold_start). A user
with a history gets the model's candidates re-ranked by the items' decayed record counts
(service.popularity_prior).
"""

from __future__ import annotations

from typing import Annotated, Any

import numpy as np
from fastapi import APIRouter, Body, Request, Response
from pydantic import Field, StrictInt, StrictStr

from logrecords.batch import Batch
from models.model_config import Tower
from service.cold_start import ColdStartDep
from service.deps import LimitsDep, PriorDep, StoreDep
from service.offload import OffloadDep, OffloadedBodyRoute, is_small
from service.popularity_prior import has_history, rerank, served_weight, temperature_of
from service.routes.items import check_k, item_ids_of, item_values, items_of, run_search
from service.routes.predict import batch_of, fields_needed, finite_or_fail, predictor_of
from service.schemas import ERROR_RESPONSES, U64, Instance, ItemsResponse, Record, Strict, json_response, scored
from service.user_history import HistoryDep

router = APIRouter(tags=["recommend"], responses=ERROR_RESPONSES, route_class=OffloadedBodyRoute)


class RecommendRequest(Strict):
    user: Record = Field(description="the user's features: hashed ids per slot, or the user's own field values")
    k: int = Field(10, ge=1)
    exclude: list[U64] = Field(default_factory=list, max_length=10_000, description="item ids never returned")
    exclude_values: list[StrictStr | StrictInt] = Field(default_factory=list, max_length=10_000,
                                            description="item field values never returned (hashed as item ids)")
    popularity_weight: float | None = Field(None, ge=0.0, le=1e6, allow_inf_nan=False,
                                            description="the popularity prior's weight for this request (0: the "
                                                        "model's ranking); left out, the service's "
                                                        "`popularity_prior.weight`")


class RecommendResponse(ItemsResponse):
    defaults: dict[str, list[str]] = Field(
        default_factory=dict, description="`user` -> the optional fields the raw user lacked: its vector used "
                                          "their defaults (dense 0, no id)")


RECOMMEND_EXAMPLES: dict[str, Any] = {
    "raw": {"summary": "the user's own field values (bundles with a schema)",
            "value": {"user": {"user_id": 259, "age": "18-24", "gender": "M"}, "k": 10, "exclude_values": [1193]}},
    "hashed": {"summary": "hashed feature ids per user-tower slot",
               "value": {"user": {"slots": {"user_id": [259]}}, "k": 10, "exclude": [72057594037929129]}},
}


@router.post("/v1/recommend", response_model=RecommendResponse, summary="Top-k items for a user")
async def recommend(body: Annotated[RecommendRequest, Body(openapi_examples=RECOMMEND_EXAMPLES)], request: Request,
                    store: StoreDep, limits: LimitsDep, history: HistoryDep, cold: ColdStartDep,
                    offload: OffloadDep, prior: PriorDep) -> Response:
    # one user's tower is ~0.1 ms of numpy: inline, unless a large body makes its hashing slow;
    # the search moves off the loop only when slow
    check_k(body.k, limits)
    with store.read() as side:
        items = items_of(side.items, side.version)
        predictor = predictor_of(side)

        def user_of() -> tuple[Batch, np.ndarray, np.ndarray, dict[str, list[str]]]:
            # a known user's latest behaviour, unless the request sent its history (service.user_history)
            user_batch, used = batch_of(side, [body.user], ["user"], also=history.key_slots(side),
                                        needs=fields_needed(side, towers=(Tower.USER,)))
            user_batch = history.complete(side, user_batch)
            user = finite_or_fail(predictor.user_vectors(user_batch), "user vector")
            exclude = np.array(body.exclude, np.uint64)
            if body.exclude_values:
                exclude = np.concatenate([exclude, item_ids_of(side, body.exclude_values, "exclude_values")])
            return user_batch, user, exclude, used

        user_batch, user, exclude, defaults = user_of() if is_small(request) else await offload.run(user_of)
        version = side.version
        popular = cold.answer(side, user_batch, body.k, exclude)
        raw = not isinstance(body.user, Instance)  # raw values asked: items answered with theirs too
        if popular is not None:  # a user the model knows nothing of (service.cold_start)
            values = item_values(side, popular[0]) if raw else None
            return json_response({"version": version, "items": scored(*popular, values), "defaults": defaults})
        # a user with a history: the top candidates re-ranked by the items' decayed counts (service.popularity_prior)
        counts = side.item_counts
        weight = served_weight(prior.weight, counts) if body.popularity_weight is None else body.popularity_weight
        temperature = temperature_of(side.model)
        reranked = (weight > 0 and counts is not None and temperature is not None
                    and has_history(user_batch, history.slot(side)))
        wanted = body.k + exclude.shape[0]
        # the prior re-ranks ``candidates`` items besides the excluded ones
        ids, scores = await run_search(items, items.search, user,
                                       max(wanted, prior.candidates + exclude.shape[0]) if reranked else wanted)
        ids, scores = ids[0], scores[0]
        if exclude.shape[0]:
            keep = ~np.isin(ids, exclude)
            ids, scores = ids[keep], scores[keep]
        if reranked:
            assert counts is not None and temperature is not None
            top = max(body.k, prior.candidates)
            ids, scores = rerank(ids[:top], scores[:top], counts, weight, temperature, prior.scale)
        ids, scores = ids[: body.k], scores[: body.k]
        values = item_values(side, ids) if raw else None
    return json_response({"version": version, "items": scored(ids, scores, values), "defaults": defaults})
