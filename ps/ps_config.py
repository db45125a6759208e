"""The parameter-server config shared by shards, trainers and the launcher.

One YAML file lists the sparse tables every shard serves, so trainers and shards agree on
names, widths and optimizers::

    tables:
      - {name: emb, dim: 16, optimizer: {kind: adagrad, lr: 0.05}}
    client: {timeout_s: 10, retries: 2, max_keys_per_request: 131072, max_dense_elements: 4194304}
    auth: {max_skew_s: 60, replay_capacity: 1048576}

The largest frame a shard accepts (:meth:`PSConfig.max_frame_bytes`) follows from it: a
request carries at most ``max_keys_per_request`` keys (the client splits bigger ones), so
its largest array frame is that many rows of the widest table's float32 gradients (or
uint64 keys), or a dense part of ``max_dense_elements`` float32; the header frame is at
most ``HEADER_FRAME_MAX_BYTES``. A frame over the limit is dropped by libzmq as it arrives
(ZMQ_MAXMSGSIZE), before it is buffered, and the peer disconnected.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, model_validator

from core.logs import LoggingConfig
from core.metrics_http import MetricsConfig
from core.yaml_config import FrozenModel, load_yaml
from ps.protocol import INLINE_MAX_BYTES, MAX_ARRAYS
from ps.routing import DEFAULT_SLICE_MIN_ELEMENTS
from tables.admission import DEFAULT_SKETCH_SHARE
from tables.table_config import TableConfig, TierConfig

# the header frame: fixed fields, the table name, array shapes, a small JSON meta (options,
# a LOAD's chain of directories) and the arrays small enough to travel inline
HEADER_FRAME_MAX_BYTES = (1 << 20) + MAX_ARRAYS * INLINE_MAX_BYTES


class ClientConfig(FrozenModel):
    """How a client waits for shards: each attempt gets ``timeout_s``; ``retries`` resends.
    A request to one shard carries at most ``max_keys_per_request`` keys (bigger ones are
    split) and a dense part at most ``max_dense_elements`` (a bigger one is refused)."""

    timeout_s: float = Field(10.0, gt=0.0, description="Seconds each attempt of a request waits for a shard's answer.")
    retries: int = Field(2, ge=0, le=100, description="Times a request is sent again after a timeout.")
    max_keys_per_request: int = Field(1 << 17, ge=1, le=1 << 24,
                                      description="Most keys one request to one shard carries; a bigger request is "
                                                  "split.")
    max_dense_elements: int = Field(1 << 22, ge=1, le=1 << 28,
                                    description="Most dense elements one request carries; a bigger one is refused.")


class AuthConfig(FrozenModel):
    """The shard's request authentication (:mod:`ps.auth`): timestamps at most ``max_skew_s``
    off its clock are accepted, and the tags of that window remembered, at most
    ``replay_capacity`` of them (about 80 bytes each)."""

    max_skew_s: float = Field(60.0, gt=0.0, le=3600.0)
    replay_capacity: int = Field(1 << 20, ge=1)


class ShardLimits(FrozenModel):
    """``max_bytes``: what one shard's sparse tables may hold in all (rows, indexes, optimizer
    state, sketches, tombstones; :mod:`tables.budget`). It is split over the tables, not
    pooled: each gets its fixed bytes and a share of the rest in proportion to its bytes per
    row (so each can hold about as many rows). A table's own ``eviction.max_bytes`` applies
    when smaller; its ``eviction.over_budget`` says what happens when full.
    ``max_sketch_share``: the most of the machine's memory one table's admission sketches may
    take on a shard (:func:`tables.admission.check_sketch_memory`)."""

    max_bytes: int | None = Field(None, ge=1,
                                  description="Bytes one shard's sparse tables may hold in all, split over the tables "
                                              "in proportion to their bytes per row; left out, no bound.")
    max_sketch_share: float = Field(
        DEFAULT_SKETCH_SHARE, gt=0.0, le=1.0,
        description="Most of this machine's memory (physical, or the container's limit) one table's admission "
                    "sketches may take on a shard; a bigger sketch is refused, in the YAML and by a runtime "
                    "policy change.")
    staleness_sample: int = Field(
        0, ge=0, description="Follow the rows of 1 in this many keys: the updates each took between a worker's pull "
                             "and its push (ps.staleness; workers tag their requests); 0: off, nothing measured.")


class PSConfig(FrozenModel):
    tables: tuple[TableConfig, ...] = ()
    id_rows_tier: TierConfig | None = Field(
        None, description="The disk tier of the id-rows tables a shard makes (users' histories, items' feature "
                          "rows, rate rows); None: RAM only.")
    dense_slice_min_elements: int = Field(DEFAULT_SLICE_MIN_ELEMENTS, ge=1)
    client: ClientConfig = ClientConfig()
    shard: ShardLimits = ShardLimits()
    auth: AuthConfig = AuthConfig()
    metrics: MetricsConfig = MetricsConfig()  # each shard's /metrics (ps.shard_metrics); `--metrics-port` overrides
    logging: LoggingConfig = LoggingConfig()  # how each shard logs (core.logs)

    @model_validator(mode="after")
    def _unique_names(self) -> PSConfig:
        names = [t.name for t in self.tables]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"duplicate table names: {dupes}")
        return self

    def max_frame_bytes(self) -> int:
        """The largest frame of a legitimate request to a shard serving these tables (module docstring)."""
        widest = max((t.width for t in self.tables), default=1)
        rows = self.client.max_keys_per_request * 4 * max(widest, 2)  # float32 rows; uint64 keys are 2 floats wide
        return max(HEADER_FRAME_MAX_BYTES, rows, 4 * self.client.max_dense_elements)

    def table(self, name: str) -> TableConfig:
        for t in self.tables:
            if t.name == name:
                return t
        raise KeyError(name)


def load_ps_config(path: str | Path) -> PSConfig:
    return load_yaml(path, PSConfig)
