"""Typed training configuration, loaded from ONE YAML file.

``model:`` says what is trained (:class:`models.model_config.ModelConfig`); ``passes:`` when a
pass ends and what it keeps; ``dense_update`` who runs the dense optimizer. Unknown keys are
errors naming key and file. The model must fit ``records`` (:mod:`models.schema_fit`): its
``n_dense`` defaults to the schema's dense field count, and a contradiction is an error naming
the model's key.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from core.logs import LoggingConfig
from core.metrics_http import MetricsConfig
from core.yaml_config import FrozenModel, load_yaml
from logrecords.schema_config import SchemaConfig
from models.model_config import ModelConfig, ModelType
from models.schema_fit import check_fit, fill_dense_width
from streaming.kafka_config import KafkaConfig


class DenseUpdate(StrEnum):
    """Who runs the dense optimizer (see :mod:`trainer.dense_sync`)."""

    LOCAL = "local"  # each worker, merging its changes through the PS every dense_sync_steps steps
    PS = "ps"  # the PS shards, on the gradients every worker pushes each step


# with several workers the dense Adam restarts at each merge (model.dense_outer), which acts only if a worker
# merges many times in a pass; the streaming job and `train-files` share it (bench/RESULTS.md)
DEFAULT_DENSE_SYNC_STEPS = 8

# a pass is a checkpoint and an export: every 2 s, served rows trail events by ~2-4 s (bench/freshness.py)
DEFAULT_PASS_SECONDS = 2.0


class PassConfig(FrozenModel):
    """A pass ends every ``records`` records (over all workers) or ``seconds`` seconds, whichever first."""

    records: int | None = Field(None, ge=1,
                                description="A pass ends after this many records over all workers, or after "
                                            "`seconds`, whichever comes first; null: by time only.")
    seconds: float | None = Field(DEFAULT_PASS_SECONDS, gt=0.0,
                                  description="A pass (a checkpoint and a bundle) ends after this many seconds, or "
                                              "after `records`, whichever comes first; null: by records only, as when "
                                              "`records` is set and this left out. Every few seconds, served rows "
                                              "trail events by seconds; large tables may want longer passes, traded "
                                              "against freshness.")
    # a pass by records leaves the stream's last records (fewer than a pass) waiting for `seconds`, which must be
    # long enough that a slow machine does not end a pass by time mid-stream: a lull that long ends it sooner
    idle_seconds: float | None = Field(None, gt=0.0,
                                       description="A pass holding records also ends once its worker has had no new "
                                                   "record for this many seconds (the end of a replayed log); null: "
                                                   "off.")
    base_every: int = Field(5, ge=1,
                            description="Every this many passes a sparse base (else deltas) and a shrink, and every "
                                        "this many exports a full bundle.")
    keep: int = Field(3, ge=1, description="Complete passes kept; older ones are pruned.")
    export: bool = Field(True, description="The chief exports an inference bundle after each committed pass.")
    keep_bundles: int = Field(10, ge=1, description=(
        "Inference bundles kept under export_dir: the newest N, plus the older ones their delta chains and "
        "the running services still need (exports.retention); older ones are deleted after each export."))

    @model_validator(mode="before")
    @classmethod
    def _by_records_alone_when_told(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("records") is not None and "seconds" not in data:
            return {**data, "seconds": None}
        return data

    @model_validator(mode="after")
    def _check(self) -> PassConfig:
        if self.records is None and self.seconds is None:
            raise ValueError("a pass needs an end: set records, seconds or both")
        return self


class JobConfig(FrozenModel):
    """The streaming training job (``streamrec train --config``)."""

    # before model: the model is checked against it
    records: SchemaConfig = Field(SchemaConfig.criteo(), description="The record layout on the topic.")
    model: ModelConfig = Field(description="What is trained: the model type, its slots, sizes and optimizers.")
    kafka: KafkaConfig = Field(KafkaConfig(), description="Where the records come from and how they are batched.")
    passes: PassConfig = Field(PassConfig(), description="When a pass ends and what it keeps.")
    dense_update: DenseUpdate = Field(DenseUpdate.LOCAL,
                                      description="Who runs the dense optimizer: `local` (each worker, merging "
                                                  "through the PS) or `ps` (the shards, on the gradients every worker "
                                                  "pushes).")
    dense_sync_steps: int = Field(DEFAULT_DENSE_SYNC_STEPS, ge=1,
                                  description="async/geo: `local` merges the dense model and `ps` pulls it every this "
                                              "many steps (sync: every step).")
    checkpoint_dir: str = Field("checkpoints",
                                description="Root of the pass checkpoints: a path, a `file://` or an `s3://` URL.")
    export_dir: str = Field("exports",
                            description="Root of the exported inference bundles: a path, a `file://` or an `s3://` "
                                        "URL.")
    metric_window: int = Field(20_000, ge=1, description="Records per progressive-validation (AUC) window.")
    control_endpoint: str = Field("tcp://127.0.0.1:0",
                                  description="The chief's job-control socket (tcp://host:port; port 0: a free one).")
    prefetch_pull: bool = Field(True, description="async mode: pull the next batch's rows while this one computes.")
    # 256: holdout AUC as with batches of 50 (tests/trainer/test_minibatch_quality.py)
    batch_size: int = Field(256, ge=1, le=1 << 20,
                            description="Records per training step whatever the size of Kafka's polls: big polls are "
                                        "split, small ones joined.")
    steps_per_batch: int = Field(1, ge=1, le=8,
                                 description="Updates per mini-batch: a repeat learns from the same records once more.")
    dense_parts: int | Literal["auto"] = Field(
        "auto", description="wide_deep/deepfm: the MLP takes this many steps per mini-batch, one per slice of its "
                            "records, the embeddings one on the whole batch; with K workers K parts keep one "
                            "worker's number of dense steps. `auto`: one per 8 workers (16 workers: 2, 32: 4; "
                            "fewer than 16: 1), 1 in sync mode and for other models (bench/RESULTS.md).")
    batch_wait_ms: int = Field(500, ge=0,
                               description="A mini-batch not yet full waits at most this long for more polls (an "
                                           "empty poll sends it at once).")
    metrics: MetricsConfig = Field(MetricsConfig(),
                                   description="Where each worker serves its Prometheus `/metrics` (`--metrics-port` "
                                               "overrides the port).")
    logging: LoggingConfig = Field(LoggingConfig(), description="How each worker logs (core.logs).")

    @field_validator("model", mode="before")
    @classmethod
    def _dense_width_from_schema(cls, model: Any, info: ValidationInfo) -> Any:
        records = info.data.get("records")  # absent when it was invalid: that error is reported
        return model if records is None else fill_dense_width(model, records)

    @field_validator("model")
    @classmethod
    def _fits_schema(cls, model: ModelConfig, info: ValidationInfo) -> ModelConfig:
        records = info.data.get("records")
        if records is not None:
            check_fit(model, records, model_key="model", schema_key="records")
        return model

    @field_validator("dense_parts")
    @classmethod
    def _dense_parts_in_range(cls, parts: int | str) -> int | str:
        if parts != "auto" and not 1 <= parts <= 64:
            raise ValueError(f"dense_parts must be auto or an integer in [1, 64], got {parts!r}")
        return parts

    @model_validator(mode="after")
    def _dense_parts_fit_the_model(self) -> JobConfig:
        check_dense_parts_fit(self.model, self.dense_parts, key="dense_parts")
        return self


def check_dense_parts_fit(model: ModelConfig, dense_parts: int | str, *, key: str) -> None:
    """Raise ValueError naming ``key`` when ``dense_parts`` > 1 is set for a model without an MLP to split,
    so the config is refused where it is read rather than by each trainer at its start (``auto``
    fits every model: it is 1 for those)."""
    if dense_parts != "auto" and int(dense_parts) > 1 and model.type not in (ModelType.WIDE_DEEP, ModelType.DEEPFM):
        raise ValueError(f"{key} {dense_parts}: only wide_deep and deepfm step their MLP in parts; "
                         f"the {model.type} model has none (set it to 1)")


def load_job_config(path: str | Path) -> JobConfig:
    return load_yaml(path, JobConfig)
