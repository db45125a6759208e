"""CTR scores from the served model (exports.predictor.Predictor over the pinned bundle).

An instance is hashed ids (``{"dense": [...], "slots": {slot: [ids]}}``) or a record's own field
values (``{"user_id": 259, "genres": ["Comedy"]}``), hashed with the bundle's schema
(exports.raw_records); hashed ids of a schema slot must carry that slot's id. When the job keeps
user histories, an instance without one is scored with its user's latest (service.user_history),
as the towers were trained.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Annotated, Any

import numpy as np
from fastapi import APIRouter, Body, Request, Response
from pydantic import BaseModel, Field

from core.errors import InvalidInput, Unavailable
from exports.predictor import Predictor, instances_to_batch
from logrecords.batch import Batch
from models.model_config import ModelType, Tower
from service.deps import LimitsDep, StoreDep
from service.model_store import Side
from service.offload import OffloadDep, OffloadedBodyRoute, is_small
from service.schemas import ERROR_RESPONSES, Instance, Record, Strict, json_response
from service.user_history import HistoryDep

router = APIRouter(tags=["predict"], responses=ERROR_RESPONSES, route_class=OffloadedBodyRoute)
_INLINE_INSTANCES = 64  # up to this many small instances take well under a millisecond: on the event loop


class PredictRequest(Strict):
    instances: list[Record] = Field(min_length=1, description="hashed ids, or a record's own field values")


PREDICT_EXAMPLES: dict[str, Any] = {
    "raw": {"summary": "a record's own field values (bundles with a schema)",
            "value": {"instances": [{"user_id": 259, "age": "18-24", "movie_id": 1193,
                                     "genres": ["Comedy", "Drama"]}]}},
    "hashed": {"summary": "hashed feature ids per slot",
               "value": {"instances": [{"slots": {"user_id": [259], "movie_id": [72057594037929129]}}]}},
}


class PredictResponse(BaseModel):
    version: int
    scores: list[float] = Field(description="click probability per instance, in request order")
    defaults: dict[str, list[str]] = Field(
        default_factory=dict, description="per raw instance that lacked optional fields (`instances[2]`), those "
                                          "fields: scored with their defaults (dense 0, no id)")


def predictor_of(side: Side) -> Predictor:
    if side.predictor is None or side.model is None:
        raise Unavailable(f"bundle {side.version} has no model to score with")
    return side.predictor


def fields_needed(side: Side, *, towers: Collection[Tower] = (Tower.USER, Tower.ITEM)) -> list[str]:
    """The record fields the model reads (the slots of ``towers`` and the dense inputs), and, for
    a prediction (both towers), the schema's item field: an instance is scored for an item."""
    model, hasher = side.model, side.records
    assert model is not None
    if hasher is None:
        return []
    schema = hasher.schema
    needs = [s.name for s in model.slots if s.tower in towers or model.type is not ModelType.TWO_TOWER]
    needs += schema.dense_names if model.n_dense else []
    if Tower.ITEM in towers and schema.item_id is not None:
        needs.append(schema.item_id)
    return needs


def batch_of(side: Side, records: Sequence[Instance | dict[str, Any]], where: Sequence[str],
             also: Sequence[str] = (), *, needs: Collection[str] = ()) -> tuple[Batch, dict[str, list[str]]]:
    """The Batch of hashed or raw records (``where[i]`` names record i in errors): the model's slots,
    and the schema slots ``also`` the service itself reads (the user id that keys the history); and
    per raw record, the optional fields of ``needs`` it lacked (scored with their defaults). A raw
    record lacking a required field of ``needs``, or any record lacking the schema's item field when
    ``needs`` holds it, is refused naming the field."""
    model = side.model
    assert model is not None
    slots = [s.name for s in model.slots]
    slots += [a for a in also if a not in slots]
    hasher = side.records
    raw = [i for i, r in enumerate(records) if not isinstance(r, Instance)]
    if raw and hasher is None:
        raise InvalidInput(f"{where[raw[0]]}: raw field values need a bundle with the record schema; bundle "
                           f"{side.version} has none (exported before schemas were): send hashed ids "
                           f"{{\"slots\": {{slot: [ids]}}}}", detail={"field": where[raw[0]]})
    hashed: dict[int, dict[str, Any]] = {}
    defaults: dict[str, list[str]] = {}
    if raw and hasher is not None:
        found, defaults = hasher.instances([records[i] for i in raw], [where[i] for i in raw], slots=slots,
                                           needs=needs)
        item = hasher.schema.item_id
        for i in raw:  # the item is no field with a default, whatever its slot says
            if item is not None and item in needs and records[i].get(item) is None:
                raise InvalidInput(f"{where[i]}.{item}: absent; an instance is scored for an item",
                                   detail={"field": f"{where[i]}.{item}"})
        hashed = dict(zip(raw, found, strict=True))
    instances = []
    for i, r in enumerate(records):
        if isinstance(r, Instance):
            if hasher is not None:
                for name, ids in r.slots.items():
                    hasher.check_ids(name, np.array(ids, np.uint64), f"{where[i]}.slots.{name}")
                item = hasher.schema.item_id
                if item is not None and item in needs and not r.slots.get(item):
                    raise InvalidInput(f"{where[i]}.slots.{item}: absent; an instance is scored for an item",
                                       detail={"field": f"{where[i]}.slots.{item}"})
            instances.append(r.as_dict())
        else:
            instances.append(hashed[i])
    return instances_to_batch(instances, slots=slots, n_dense=model.n_dense), defaults


def finite_or_fail(values: np.ndarray, what: str) -> np.ndarray:
    bad = ~np.isfinite(values).reshape(values.shape[0], -1).all(axis=1)
    if bad.any():
        first = int(np.argmax(bad))
        raise InvalidInput(f"instance {first}: the {what} is not finite (inputs out of range)",
                           detail={"instances": np.flatnonzero(bad)[:20].tolist()})
    return values


@router.post("/v1/predict", response_model=PredictResponse, summary="CTR scores of instances")
async def predict(body: Annotated[PredictRequest, Body(openapi_examples=PREDICT_EXAMPLES)], request: Request,
                  store: StoreDep, limits: LimitsDep, history: HistoryDep, offload: OffloadDep) -> Response:
    if len(body.instances) > limits.max_instances:
        raise InvalidInput(f"instances: {len(body.instances)} exceed the limit of {limits.max_instances}",
                           detail={"max_instances": limits.max_instances})
    with store.read() as side:
        predictor = predictor_of(side)
        where = [f"instances[{i}]" for i in range(len(body.instances))]

        def score() -> np.ndarray:
            # each known user's latest behaviour, unless the instance sent its history (service.user_history)
            batch, used = batch_of(side, body.instances, where, also=history.key_slots(side),
                                   needs=fields_needed(side))
            return predictor.predict(history.complete(side, batch)), used

        if len(body.instances) <= _INLINE_INSTANCES and is_small(request):
            raw, defaults = score()
        else:  # hashing and scoring a large request take a worker thread, not the event loop
            raw, defaults = await offload.run(score)
        scores = finite_or_fail(raw, "score")
        version = side.version
    return json_response({"version": version, "scores": scores.tolist(), "defaults": defaults})
