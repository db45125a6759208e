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
from typing import Any

from pydantic import Field, ValidationInfo, field_validator, model_validator

from core.metrics_http import MetricsConfig
from core.yaml_config import FrozenModel, load_yaml
from logrecords.schema_config import SchemaConfig
from models.model_config import ModelConfig
from models.schema_fit import check_fit, fill_dense_width
from streaming.kafka_config import KafkaConfig


class DenseUpdate(StrEnum):
    """Who runs the dense optimizer (see :mod:`trainer.dense_sync`)."""

    LOCAL = "local"  # each worker, merging its changes through the PS every dense_sync_steps steps
    PS = "ps"  # the PS shards, on the gradients every worker pushes each step


class PassConfig(FrozenModel):
    """A pass ends every ``records`` records (over all workers) or ``seconds`` seconds, whichever first."""

    records: int | None = Field(100_000, ge=1)
    seconds: float | None = Field(None, gt=0.0)
    base_every: int = Field(5, ge=1)  # K: sparse base every K passes (else deltas), shrink every K passes,
    #                                   a full (base) bundle every K exports
    keep: int = Field(3, ge=1)  # M: complete passes kept
    export: bool = True

    @model_validator(mode="after")
    def _check(self) -> PassConfig:
        if self.records is None and self.seconds is None:
            raise ValueError("a pass needs an end: set records, seconds or both")
        return self


class JobConfig(FrozenModel):
    """The streaming training job (``streamrec train --config``)."""

    records: SchemaConfig = SchemaConfig.criteo()  # record layout on the topic (before model: it checks against it)
    model: ModelConfig
    kafka: KafkaConfig = KafkaConfig()
    passes: PassConfig = PassConfig()
    dense_update: DenseUpdate = DenseUpdate.LOCAL
    # async/geo: local merges the dense model every k steps, ps pulls it every k steps (sync: every step)
    dense_sync_steps: int = Field(8, ge=1)
    checkpoint_dir: str = "checkpoints"
    export_dir: str = "exports"
    metric_window: int = Field(100_000, ge=1)  # records per progressive-validation window
    control_endpoint: str = "tcp://127.0.0.1:0"  # chief's job-control socket
    prefetch_pull: bool = True  # async mode: pull the next batch's rows while this one computes
    # records per training step, whatever the size of Kafka's polls (trainer.minibatch): big polls
    # are split, small ones joined. 256: holdout AUC as with batches of 50 (tests/trainer/test_minibatch_quality.py)
    batch_size: int = Field(256, ge=1, le=1 << 20)
    # updates per mini-batch: a repeat learns from the same records once more (the one pass of a stream, reread)
    steps_per_batch: int = Field(1, ge=1, le=8)
    # a mini-batch not full yet waits at most this long for more polls (an empty poll sends it at once)
    batch_wait_ms: int = Field(500, ge=0)
    # each worker's /metrics (trainer.trainer_metrics); host None: the control endpoint's; `--metrics-port` overrides
    metrics: MetricsConfig = MetricsConfig()

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


def load_job_config(path: str | Path) -> JobConfig:
    return load_yaml(path, JobConfig)
