"""CTR scores from the served model (exports.predictor.Predictor over the pinned bundle)."""

from __future__ import annotations

import numpy as np
from fastapi import APIRouter, Response
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, Field

from core.errors import InvalidInput, Unavailable
from exports.predictor import Predictor, instances_to_batch
from service.deps import LimitsDep, StoreDep
from service.model_store import Side
from service.schemas import ERROR_RESPONSES, Instance, Strict, json_response
from streaming.batch import Batch

router = APIRouter(tags=["predict"], responses=ERROR_RESPONSES)
_INLINE_INSTANCES = 64  # up to this many instances take well under a millisecond: score on the event loop


class PredictRequest(Strict):
    instances: list[Instance] = Field(min_length=1)


class PredictResponse(BaseModel):
    version: int
    scores: list[float] = Field(description="click probability per instance, in request order")


def predictor_of(side: Side) -> Predictor:
    if side.predictor is None or side.model is None:
        raise Unavailable(f"bundle {side.version} has no model to score with")
    return side.predictor


def batch_of(side: Side, instances: list[Instance]) -> Batch:
    model = side.model
    assert model is not None
    return instances_to_batch([i.as_dict() for i in instances], slots=[s.name for s in model.slots],
                              n_dense=model.n_dense)


def finite_or_fail(values: np.ndarray, what: str) -> np.ndarray:
    bad = ~np.isfinite(values).reshape(values.shape[0], -1).all(axis=1)
    if bad.any():
        first = int(np.argmax(bad))
        raise InvalidInput(f"instance {first}: the {what} is not finite (inputs out of range)",
                           detail={"instances": np.flatnonzero(bad)[:20].tolist()})
    return values


@router.post("/v1/predict", response_model=PredictResponse, summary="CTR scores of instances")
async def predict(body: PredictRequest, store: StoreDep, limits: LimitsDep) -> Response:
    if len(body.instances) > limits.max_instances:
        raise InvalidInput(f"instances: {len(body.instances)} exceed the limit of {limits.max_instances}",
                           detail={"max_instances": limits.max_instances})
    with store.read() as side:
        predictor = predictor_of(side)
        batch = batch_of(side, body.instances)
        if len(body.instances) <= _INLINE_INSTANCES:
            raw = predictor.predict(batch)
        else:  # big batches score in a worker thread, off the event loop
            raw = await run_in_threadpool(predictor.predict, batch)
        scores = finite_or_fail(raw, "score")
        version = side.version
    return json_response({"version": version, "scores": scores.tolist()})
