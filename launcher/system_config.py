"""The ONE streamrec YAML: every section the roles need, plus how ``streamrec up`` runs them.

::

    kafka:   logrecords.schema_config.KafkaConfig   (no bootstrap_servers: `up` starts the embedded broker)
    schema:  logrecords.schema_config.SchemaConfig  (default: the generator's JSON layout)
    ps:      the parameter-server client, each shard's byte budget and every table's policies
    train:   trainer.job_config.JobConfig less kafka/records (model, passes, checkpoint and export roots)
    service: service.settings.ServiceSettings, less what comes from elsewhere (exports, host, port)
    up:      shards, workers, generator, API address, what Ctrl-C does
    logging: core.logs.LoggingConfig (level, text or JSON lines, the service's access log), every role's

Every key has a default that works out of the box; an unknown key is an error naming the key
and the file. :func:`role_files` renders what each role's own loader reads (``ps.yaml``,
``train.yaml``, ``service.yaml``), so ``up``, docker-compose and Kubernetes all start the
roles from this one file (``streamrec config render``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ConfigDict, Field, ValidationInfo, create_model, field_validator, model_validator

from core.fork_server import DEFAULT_START_METHOD, StartMethod
from core.logs import LoggingConfig
from core.yaml_config import FrozenModel, load_yaml
from launcher.restart_policy import RestartPolicy
from logrecords.sample_encoding import generated_json_schema
from logrecords.schema_config import SchemaConfig
from models.model_config import ModelConfig
from models.schema_fit import check_fit, fill_dense_width
from ps.ps_config import ClientConfig, ShardLimits
from ps.routing import DEFAULT_SLICE_MIN_ELEMENTS
from service.settings import DEFAULT_PORT, ServiceSettings
from stores.store import local_path_of
from streaming.kafka_config import KafkaConfig
from tables.table_config import TableConfig, TablePolicy
from trainer.job_config import JobConfig, check_dense_parts_fit


def default_model() -> ModelConfig:
    """Two towers over the generator's user and item slots plus a few context slots: small
    enough for a laptop, and it exports item vectors, so `similar` works from the first pass."""
    slots = [{"name": "user_id", "tower": "user"}, {"name": "item_id", "tower": "item"}]
    slots += [{"name": f"C{i}", "tower": "user"} for i in range(3, 9)]
    # the generator's stream is a click stream (items drawn independently of users): the click loss learns it
    return ModelConfig.model_validate({"type": "two_tower", "slots": slots, "embedding_dim": 8, "mlp": [32],
                                       "tower_dim": 16, "retrieval": {"loss": "pointwise", "normalize": False}})


# The job's own kafka, records and logging sections come from the root's kafka, schema and
# logging (shared with the other roles), so the train section is JobConfig without them; its one
# default of its own is the model, which a job file must name.
_SHARED = ("kafka", "records", "logging")
_UP_DEFAULTS = {
    "model": (ModelConfig, Field(default_factory=lambda: default_model(),
                                 description="What is trained; default: two towers over the generator's slots.")),
}
TrainSection = create_model(
    "TrainSection", __base__=FrozenModel, __doc__="trainer.job_config.JobConfig less kafka and records.",
    **{name: (f.annotation, f) for name, f in JobConfig.model_fields.items()
       if name not in (*_SHARED, *_UP_DEFAULTS)},
    **_UP_DEFAULTS,
)


DEFAULT_POLICY = "default"  # the ps.tables entry every table starts from
ID_ROWS_POLICY = "ids"  # the ps.tables entry of the shards' id-rows tables (histories, item features, rates)


class PSSection(FrozenModel):
    """The parameter server: its client, each shard's byte budget and the tables' policies.

    ``tables`` maps ``default``, a table name (``emb8``, ``emb8.user_id``, ``bias.items``) or a model
    slot name to a :class:`tables.table_config.TablePolicy`; a slot named there gets a table of its
    own (``emb{dim}.{slot}``, as a slot with an optimizer of its own), so its policy is its alone.
    ``ids`` is the id-rows tables' (:mod:`tables.id_rows_table`): only its ``tier`` applies."""

    client: ClientConfig = Field(ClientConfig(),
                                 description="How trainers and the service wait for shards and split their requests.")
    dense_slice_min_elements: int = Field(DEFAULT_SLICE_MIN_ELEMENTS, ge=1,
                                          description="A dense array of at least this many elements is split in "
                                                      "slices over the shards.")
    shard: ShardLimits = Field(ShardLimits(), description="What one shard's tables may hold in all.")
    tables: dict[str, TablePolicy] = Field(
        {}, description="Admission, eviction, NaN handling, show/click decay, optimizers and disk tiers per table: "
                        "keyed by `default` (every table), a table name or a model slot name (which then gets a table "
                        "of its own), or `ids` (the tables of users' histories, items' feature rows and rate rows, "
                        "whose only key is `tier`); a key left out comes from `default`, then the model.")

    def policy_of(self, *names: str) -> TablePolicy:
        """The policy of a table known by ``names`` (most specific first), ``default`` under it."""
        policy = self.tables.get(DEFAULT_POLICY, TablePolicy())
        for name in reversed(names):
            if name in self.tables:
                policy = self.tables[name].over(policy)
        return policy


class ServiceSection(ServiceSettings):
    """The service's settings; ``exports_dir`` defaults to ``train.export_dir`` (so it is optional
    here) and ``up`` sets host and port from ``up.host`` and ``up.port``."""

    exports_dir: str = Field("", description="Where the service looks for bundles; empty: `train.export_dir`.")


class GeneratorSection(FrozenModel):
    """The synthetic event stream `up` produces when no --replay file is given."""

    rate: float = Field(500.0, gt=0.0, description="Records per second the generator produces.")
    seed: int = Field(0, ge=0, description="Seed of the planted model and its stream.")
    drift: float = Field(0.0, ge=0.0,
                         description="How fast the planted users' preferences drift, in radians per million events.")


class ReplaySection(FrozenModel):
    """How `up --replay FILE` feeds the topic: as fast as the trainers take it (paused while the
    consumer group lags by more than ``max_lag`` records), or at most ``rate`` records per second."""

    rate: float | None = Field(None, gt=0.0,
                               description="Most records per second a replay sends; left out, as fast as the trainers "
                                           "take it.")
    max_lag: int | None = Field(None, ge=1,
                                description="A replay pauses while the consumer group lags by more records than this; "
                                            "left out, 4 x `kafka.batch_size` x `up.workers`.")


class UpSection(FrozenModel):
    shards: int = Field(2, ge=1, le=64, description="Parameter-server shards `up` starts.")
    workers: int = Field(2, ge=1, le=64, description="Trainers `up` starts.")
    generator: GeneratorSection = Field(GeneratorSection(),
                                        description="The synthetic stream `up` produces when no `--replay` file is "
                                                    "given.")
    replay: ReplaySection = Field(ReplaySection(), description="How `up --replay FILE` feeds the topic.")
    host: str = Field("127.0.0.1", description="Address the API binds; every other role binds loopback on a free port.")
    port: int = Field(DEFAULT_PORT, ge=0, lt=65536,
                      description="Port the API listens on; 0: a free one, drawn at start and printed.")
    run_dir: str = Field("runs/local",
                         description="Directory of the logs, checkpoints and exports (relative roots resolve here).")
    commit_on_exit: bool = Field(True, description="Ctrl-C commits a final pass before stopping.")
    stop_timeout_s: float = Field(60.0, gt=0.0, description="Seconds the final pass may take to end and be saved; "
                                  "then again the trainers' time to finish on SIGTERM before they are killed.")
    console_refresh_s: float = Field(1.0, gt=0.0, description="Seconds between redraws of the live console.")
    restart: RestartPolicy = Field(RestartPolicy(),
                                   description="How a role that dies is started again (`launcher.restart_policy`).")
    rank_lease_ttl_s: float = Field(10.0, gt=0.0, le=3600.0,
                                    description="Trainers claim their ranks as leases with this ttl: a restarted "
                                                "trainer takes a dead one's rank within it.")
    start_method: StartMethod = Field(DEFAULT_START_METHOD,
                                      description="How shards and trainers start (here and in `train-files "
                                                  "--start-method`): `fork_server` forks each from a parent that "
                                                  "loaded numba and streamrec once (a fraction of the start-up CPU); "
                                                  "`spawn` execs a fresh interpreter for each.")


class StreamrecConfig(FrozenModel):
    kafka: KafkaConfig = Field(KafkaConfig(),
                               description="Where records come from and how they are batched; no `bootstrap_servers`: "
                                           "the embedded broker.")
    schema_: SchemaConfig = Field(default_factory=generated_json_schema, alias="schema",
                                  description="The record layout; default: the generator's JSON layout.")
    # validated after schema (and its default too): train.model must fit it (models.schema_fit)
    train: TrainSection = Field(default_factory=TrainSection, validate_default=True,
                                description="The training job: model, passes, checkpoint and export roots.")
    ps: PSSection = Field(PSSection(),
                          description="The parameter-server client, each shard's byte budget and the tables' policies.")
    service: ServiceSection = Field(ServiceSection(),
                                    description="The serving API: index, limits, live path, admin token.")
    up: UpSection = Field(UpSection(), description="How `streamrec up` runs every role on this machine.")
    logging: LoggingConfig = Field(LoggingConfig(),
                                   description="How every role logs (one format; `up` renders it into each role's "
                                               "file) and the service's access log.")

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)  # "schema" is the YAML key

    @field_validator("train", mode="before")
    @classmethod
    def _dense_width_from_schema(cls, train: Any, info: ValidationInfo) -> Any:
        """train.model.n_dense left out: the schema's dense field count."""
        schema = info.data.get("schema_")  # absent when it was invalid: that error is reported
        if schema is None:
            return train
        if isinstance(train, TrainSection):
            return train.model_copy(update={"model": fill_dense_width(train.model, schema)})
        if isinstance(train, dict):
            return {**train, "model": fill_dense_width(train.get("model", default_model()), schema)}
        return train

    @field_validator("train")
    @classmethod
    def _model_fits_schema(cls, train: Any, info: ValidationInfo) -> Any:
        schema = info.data.get("schema_")
        if schema is not None:
            check_fit(train.model, schema, model_key="train.model", schema_key="schema")
        check_dense_parts_fit(train.model, train.dense_parts, key="train.dense_parts")
        return train

    @model_validator(mode="after")
    def _slot_policies(self) -> StreamrecConfig:
        """Each slot named in ``ps.tables`` gets a table of its own (its optimizer: the policy's, else
        the model's), and every other name there must be a table of the model."""
        ps, model = self.ps, self.train.model
        if not ps.tables:
            return self
        slots = []
        for s in model.slots:
            if s.name in ps.tables:
                own = ps.policy_of(s.name).optimizer or s.optimizer or model.sparse_optimizer
                s = s.model_copy(update={"optimizer": own})
            slots.append(s)
        model = model.model_copy(update={"slots": tuple(slots)})
        known = {t.name for t in model.table_configs()} | {s.name for s in slots} | {DEFAULT_POLICY, ID_ROWS_POLICY}
        unknown = sorted(set(ps.tables) - known)
        if unknown:
            raise ValueError(f"ps.tables.{unknown[0]}: no such table or slot of train.model (tables: "
                             f"{sorted(t.name for t in model.table_configs())}; slots: {[s.name for s in slots]}; "
                             f"or `{DEFAULT_POLICY}` or `{ID_ROWS_POLICY}`)")
        ids = ps.tables.get(ID_ROWS_POLICY)
        if ids is not None:
            other = sorted(k for k in ids.model_fields_set if k != "tier")
            if other:
                raise ValueError(f"ps.tables.{ID_ROWS_POLICY}.{other[0]}: the id-rows tables take only `tier` "
                                 "(their rows are written whole, not trained, and age out by the schema's history ttl)")
        return self.model_copy(update={"train": self.train.model_copy(update={"model": model})})

    def ps_tables(self) -> tuple[TableConfig, ...]:
        """The sparse tables every shard serves: the model's, with ``ps.tables``' policies."""
        model = self.train.model
        slot_of = {model.table_name(s): s.name for s in model.slots if s.optimizer is not None}
        return tuple(self.ps.policy_of(*((slot_of[t.name],) if t.name in slot_of else ()), t.name).apply(t)
                     for t in model.table_configs())


def load_config(path: str | Path | None) -> StreamrecConfig:
    """The root config from ``path`` (None: every default)."""
    return StreamrecConfig() if path is None else load_yaml(path, StreamrecConfig)


def resolve_root(location: str, base: Path) -> str:
    """A checkpoint/export root: relative local paths resolve against ``base``; URLs stay."""
    local = local_path_of(location)
    if local is None:
        return location
    return str(local if local.is_absolute() else (base / local).resolve())


def role_files(config: StreamrecConfig, *, base: Path, overrides: dict[str, Any] | None = None,
               train_overrides: dict[str, Any] | None = None) -> dict[str, dict]:
    """What each role's loader reads, as plain mappings: ``ps.yaml`` (ps.ps_config),
    ``train.yaml`` (trainer.job_config.JobConfig) and ``service.yaml`` (service.settings), each
    with the root's ``logging`` section.

    Relative checkpoint and export paths resolve against ``base``; ``overrides`` replaces
    top-level keys of the service file (host, port, job_control) and ``train_overrides`` of
    the job file (control_endpoint, kafka)."""
    train = config.train.model_dump(mode="json")
    train["kafka"] = config.kafka.model_dump(mode="json")
    train["records"] = config.schema_.model_dump(mode="json")
    train["logging"] = config.logging.model_dump(mode="json")
    train["checkpoint_dir"] = resolve_root(config.train.checkpoint_dir, base)
    train["export_dir"] = resolve_root(config.train.export_dir, base)
    id_rows_tier = config.ps.policy_of(ID_ROWS_POLICY).tier
    ps = {"tables": [t.model_dump(mode="json") for t in config.ps_tables()],
          "id_rows_tier": None if id_rows_tier is None else id_rows_tier.model_dump(mode="json"),
          **config.ps.model_dump(mode="json", exclude={"tables"}), "logging": config.logging.model_dump(mode="json")}
    service = config.service.model_dump(mode="json", exclude={"admin_token"})
    service["logging"] = config.logging.model_dump(mode="json")
    service["exports_dir"] = resolve_root(config.service.exports_dir or config.train.export_dir, base)
    service.update(overrides or {})
    train.update(train_overrides or {})
    return {"ps.yaml": ps, "train.yaml": train, "service.yaml": service}


def write_role_files(config: StreamrecConfig, out: Path, *, base: Path, overrides: dict[str, Any] | None = None,
                     train_overrides: dict[str, Any] | None = None) -> dict[str, Path]:
    """Write :func:`role_files` into ``out``; returns name -> path."""
    import yaml

    out.mkdir(parents=True, exist_ok=True)
    paths = {}
    files = role_files(config, base=base, overrides=overrides, train_overrides=train_overrides)
    for name, data in files.items():
        path = out / name
        tmp = path.with_name(f".{name}.tmp")
        tmp.write_text(yaml.safe_dump(data, sort_keys=False))
        tmp.replace(path)
        paths[name] = path
    return paths
