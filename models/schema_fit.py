"""Does a model fit the records it trains on? Checked where the two meet, at config load.

A model reads ``n_dense`` dense inputs and the sparse slots it names from every record; the
schema says what a record holds. Where a training config joins them (``trainer.job_config``'s
``model`` and ``records``, the root config's ``train.model`` and ``schema``) the model's dense
width defaults to the schema's dense field count (:func:`fill_dense_width`: a model that leaves
``n_dense`` out, or sets it to null), and a model that contradicts its schema is refused by
:func:`check_fit` naming the key to change, instead of failing at the first batch.
"""

from __future__ import annotations

from typing import Any

from logrecords.schema_config import SchemaConfig
from models.model_config import ModelConfig, ModelType, Tower


def fill_dense_width(model: Any, schema: SchemaConfig) -> Any:
    """``model`` (a mapping or a ModelConfig) with ``n_dense`` set to the schema's dense field
    count when it does not set one, and ``dense_transforms`` to the schema's when it sets none;
    anything else is returned as is (validation reports it)."""
    width = len(schema.dense_names)
    transforms = schema.dense_transforms
    if isinstance(model, ModelConfig):
        update: dict[str, Any] = {}
        if "n_dense" not in model.model_fields_set:
            update["n_dense"] = width
        if transforms and not model.dense_transforms:
            update["dense_transforms"] = transforms
        return model.model_copy(update=update) if update else model
    if isinstance(model, dict):
        if model.get("n_dense") is None:
            model = {**model, "n_dense": width}
        if transforms and not model.get("dense_transforms"):
            model = {**model, "dense_transforms": transforms}
    return model


def misfits(model: ModelConfig, schema: SchemaConfig) -> list[tuple[str, str]]:
    """Where ``model`` contradicts ``schema``: (key of the model section, what is wrong and what to set)."""
    out: list[tuple[str, str]] = []
    dense = schema.dense_names
    if model.n_dense != len(dense):
        out.append(("n_dense", f"is {model.n_dense}, but the schema has {len(dense)} dense fields "
                               f"{dense[:5]}{'...' if len(dense) > 5 else ''}: set n_dense: {len(dense)} "
                               "or leave it out (it defaults to the schema's count)"))
    sparse = [s.name for s in schema.sparse_slots]
    history = None if schema.history is None else schema.history.slot  # a list slot made from the stream
    for i, slot in enumerate(model.slots):
        if slot.name == history:
            if model.type is ModelType.TWO_TOWER and slot.tower is not Tower.USER:
                out.append((f"slots.{i}.tower", f"'{slot.name}' is the users' history: it belongs in the user "
                                                "tower (tower: user)"))
        elif slot.name not in sparse:
            out.append((f"slots.{i}.name", f"'{slot.name}' is not a sparse slot of the schema "
                                           f"(its sparse slots: {sparse[:8]}{'...' if len(sparse) > 8 else ''})"))
    if model.type is ModelType.TWO_TOWER:
        for i, slot in enumerate(model.slots):
            if slot.name == schema.item_id and slot.tower is not Tower.ITEM:
                out.append((f"slots.{i}.tower", f"'{slot.name}' is the schema's item_id: it belongs in the item "
                                                "tower (tower: item)"))
            if slot.name == schema.user_id and slot.tower is not Tower.USER:
                out.append((f"slots.{i}.tower", f"'{slot.name}' is the schema's user_id: it belongs in the user "
                                                "tower (tower: user)"))
    return out


def check_fit(model: ModelConfig, schema: SchemaConfig, *, model_key: str, schema_key: str) -> None:
    """Raise ValueError naming every key of ``model`` (``model_key``, e.g. ``train.model``) that
    contradicts ``schema`` (``schema_key``); pydantic validators turn it into the config error."""
    found = misfits(model, schema)
    if found:
        raise ValueError(f"the model does not fit {schema_key}: "
                         + "; ".join(f"{model_key}.{key} {why}" for key, why in found))
