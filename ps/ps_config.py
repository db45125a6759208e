"""The parameter-server config shared by shards, trainers and the launcher.

One YAML file lists the sparse tables every shard serves, so trainers and shards agree on
names, widths and optimizers::

    tables:
      - {name: emb, dim: 16, optimizer: {kind: adagrad, lr: 0.05}}
    client: {timeout_s: 10, retries: 2}
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, model_validator

from core.yaml_config import FrozenModel, load_yaml
from ps.routing import DEFAULT_SLICE_MIN_ELEMENTS
from tables.table_config import TableConfig


class ClientConfig(FrozenModel):
    """How a client waits for shards: each attempt gets ``timeout_s``; ``retries`` resends."""

    timeout_s: float = Field(10.0, gt=0.0)
    retries: int = Field(2, ge=0, le=100)


class ShardLimits(FrozenModel):
    """``max_bytes``: what one shard's sparse tables may hold in all (rows, indexes, optimizer
    state, sketches, tombstones; :mod:`tables.budget`). It is split over the tables, not
    pooled: each gets its fixed bytes and a share of the rest in proportion to its bytes per
    row (so each can hold about as many rows). A table's own ``eviction.max_bytes`` applies
    when smaller; its ``eviction.over_budget`` says what happens when full."""

    max_bytes: int | None = Field(None, ge=1)


class PSConfig(FrozenModel):
    tables: tuple[TableConfig, ...] = ()
    dense_slice_min_elements: int = Field(DEFAULT_SLICE_MIN_ELEMENTS, ge=1)
    client: ClientConfig = ClientConfig()
    shard: ShardLimits = ShardLimits()

    @model_validator(mode="after")
    def _unique_names(self) -> PSConfig:
        names = [t.name for t in self.tables]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"duplicate table names: {dupes}")
        return self

    def table(self, name: str) -> TableConfig:
        for t in self.tables:
            if t.name == name:
                return t
        raise KeyError(name)


def load_ps_config(path: str | Path) -> PSConfig:
    return load_yaml(path, PSConfig)
