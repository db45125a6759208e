"""Service settings: one frozen model loaded from YAML, the admin token from the environment.

The token never lives in the YAML file: ``admin_token_env`` names the variable that holds it.
Settings refuse an empty or default token when the service binds anything but loopback.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

import yaml
from pydantic import Field, field_validator, model_validator

from core.errors import ConfigError
from core.logs import LoggingConfig
from core.yaml_config import FrozenModel, validate_config
from exports.popularity_rerank import AUTO_FALLBACK_WEIGHT, DEFAULT_CANDIDATES

DEFAULT_TOKENS = frozenset({"", "changeme", "admin", "secret", "token"})


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class IndexSettings(FrozenModel):
    """The Faiss item index: exact ``flat``, ``ivf`` (trained on the base's items) or ``hnsw``
    (rebuilt whole on every item change: it cannot remove ids)."""

    kind: Literal["flat", "ivf", "hnsw"] = Field(
        "flat", description="`flat` (exact), `ivf` (trained on the base bundle's items) or `hnsw` (rebuilt whole on "
                            "every item change).")
    nlist: int = Field(1024, ge=1, description="ivf: the number of clusters.")
    nprobe: int = Field(16, ge=1, description="ivf: the clusters searched per query.")
    hnsw_m: int = Field(32, ge=4, le=128, description="hnsw: the neighbours per node.")
    hnsw_ef_search: int = Field(64, ge=1, description="hnsw: the candidate list's size per query.")
    rebuild_fraction: float = Field(0.25, gt=0.0,
                                    description="ivf: retrain in the background, then swap, once this fraction of the "
                                                "items changed since training.")


class ReadThroughSettings(FrozenModel):
    """Optional live path to the PS shards: read-through for embedding lookups and the item vectors
    of changed and new items refreshed in the index between bundles (service.live_items)."""

    endpoints: list[str] = Field(min_length=1,
                                 description="The shards in shard order (tcp://host:port); under `up`, the shards it "
                                             "starts.")
    timeout_s: float = Field(0.05, gt=0.0,
                             description="Seconds a lookup waits for the shards before it serves the bundle's rows.")
    secret_file: str | None = Field(None, description="File holding the shards' HMAC secret, when they require one.")
    live_items: bool = Field(True,
                             description="Refresh the vectors of changed and new items in the index between bundles.")
    items_interval_s: float = Field(0.1, gt=0.0, description="Seconds between reads of the shards' changed-key logs.")
    items_batch: int = Field(4096, ge=1, description="Items re-embedded and written into the index at once.")
    changes_limit: int = Field(65536, ge=1, le=1 << 18, description="Changed keys read per shard per poll.")


class LimitSettings(FrozenModel):
    max_ids: int = Field(10_000, ge=1, description="Most ids or values one lookup request may carry.")
    max_k: int = Field(1000, ge=1, description="The largest `k` a request may ask for.")
    max_instances: int = Field(1000, ge=1, description="Most instances one predict request may carry.")
    max_body_bytes: int = Field(8 << 20, ge=1024, description="The largest request body accepted, in bytes.")
    body_timeout_s: float = Field(30.0, gt=0.0,
                                  description="Seconds from a request's head to the last byte of its body (the whole "
                                              "body, not each part); past it the request is answered 408.")
    header_timeout_s: float = Field(10.0, gt=0.0,
                                    description="Seconds a connection may take, from opening or from its previous "
                                                "response, to send a complete request head; past it it is closed.")
    keep_alive_s: float = Field(5.0, gt=0.0,
                                description="Seconds a kept-alive connection may stay silent after a response before "
                                            "it is closed.")
    max_head_bytes: int = Field(16384, ge=1024, description="The largest request line plus headers, in bytes.")
    max_connections: int = Field(1000, ge=1,
                                 description="Open connections at once; at the limit a new one closes the longest-idle "
                                             "connection, and when every one is busy with a request it gets 503.")
    work_threads: int = Field(4, ge=1,
                              description="Worker threads for a request's CPU-heavy work (a large body's JSON decode, "
                                          "raw-value hashing, big batches), off the event loop.")
    work_queue: int = Field(16, ge=0,
                            description="Requests' heavy work that may wait for a worker thread; past it a request is "
                                        "answered 503 at once.")


class PopularityPriorSettings(FrozenModel):
    """/v1/recommend's popularity prior for users with a history (service.popularity_prior)."""

    # standardized: the weight then means the same whatever scale a run's logits took (service.popularity_prior)
    scale: Literal["standardized", "logit"] = Field(
        "standardized", description="How the prior meets the model's scores: `standardized` adds weight x the "
                                    "candidates' standardized log1p(count) to their standardized scores, `logit` "
                                    "adds weight x log1p(count) to the model's logit.")
    # auto, the job's own choice on its latest records: a fixed 3 (MovieLens 100K's best) cut recall on the
    # planted logs by a third to a half, auto serves them the model's recall and MovieLens 100K a little below 3
    weight: float | Literal["auto"] = Field(
        "auto", description="Weight of the prior (log1p of the item's decayed record count, in `scale`'s units) "
                            "for a user with a history; 0: the model's ranking for everyone; `auto` (standardized "
                            "scale only): the weight the training job chose on its users' latest picks and wrote "
                            f"into the bundle ({AUTO_FALLBACK_WEIGHT:g} for a bundle without one).")

    candidates: int = Field(DEFAULT_CANDIDATES, ge=1,
                            description="Items the prior re-ranks, besides the request's exclusions (at least the "
                                        "request's k).")


    @field_validator("weight")
    @classmethod
    def _weight_in_range(cls, weight: float | str) -> float | str:
        if weight != "auto" and not 0.0 <= weight <= 1e6:  # NaN fails the comparison too
            raise ValueError(f"popularity_prior.weight must be auto or a number in [0, 1e6], got {weight!r}")
        return weight

    @model_validator(mode="after")
    def _auto_is_standardized(self) -> PopularityPriorSettings:
        if self.weight == "auto" and self.scale != "standardized":
            raise ValueError("popularity_prior.weight auto is chosen for the standardized scale: give scale "
                             "standardized or a number as the weight")
        return self


DEFAULT_PORT = 8000


class ServiceSettings(FrozenModel):
    host: str = Field("127.0.0.1",
                      description="Address the API binds; anything but loopback needs a non-default admin token.")
    port: int = Field(DEFAULT_PORT, ge=0, lt=65536,
                      description="Port the API listens on (`streamrec serve`, compose and k8s; `up` takes `up.port`).")
    exports_dir: str = Field(description="Where the service looks for inference bundles: a path, a `file://` or an "
                                         "`s3://` URL.")
    # a pass exports a bundle every few seconds by default (train.passes): look often
    poll_seconds: float = Field(0.5, gt=0.0,
                                description="Seconds between looks for a new bundle (with an `s3://` root, each look "
                                            "lists the bucket's prefix).")
    admin_token_env: str = Field("STREAMREC_ADMIN_TOKEN",
                                 description="The environment variable holding the admin API's bearer token (never "
                                             "the YAML).")
    admin_token: str = Field("",
                             description="Filled from `admin_token_env` when loaded, never from the file; empty: the "
                                         "admin API is off.")
    job_control: str | None = Field(None,
                                    description="The training job's control endpoint (tcp://host:port), for the admin "
                                                "API.")
    job_control_file: str | None = Field(None,
                                         description="Or: the `control.json` the chief writes under "
                                                     "`train.checkpoint_dir`, re-read on every call so it follows "
                                                     "whichever trainer holds rank 0.")
    job_timeout_s: float = Field(10.0, gt=0.0, description="Seconds a call to the job's control endpoint may take.")
    job_secret_file: str | None = Field(None,
                                        description="File holding the cluster secret that signs job-control requests, "
                                                    "needed when the trainers have one and always off loopback.")
    index: IndexSettings = Field(IndexSettings(), description="The Faiss item index.")
    read_through: ReadThroughSettings | None = Field(
        None, description="The live path to the PS shards (read-through lookups, live item vectors); left out, "
                          "bundles only.")
    limits: LimitSettings = Field(LimitSettings(), description="Request size and connection limits.")
    popularity_prior: PopularityPriorSettings = Field(
        PopularityPriorSettings(), description="/v1/recommend's re-ranking of a known user's candidates by the items' "
                                               "decayed record counts.")
    cold_start: Literal["popular", "model"] = Field(
        "popular", description="A user none of whose ids has a row gets the items most liked lately (`popular`) or "
                               "the towers' vector of nothing (`model`).")

    @model_validator(mode="after")
    def _secure(self) -> ServiceSettings:
        if self.job_control is not None and self.job_control_file is not None:
            raise ValueError("set job_control or job_control_file, not both")
        if not is_loopback(self.host) and self.admin_token in DEFAULT_TOKENS:
            raise ValueError(f"host {self.host} is not loopback: set a non-default admin token in "
                             f"${self.admin_token_env}")
        return self


class ServiceFile(ServiceSettings):
    """What ``streamrec serve --config`` reads: the settings and the role's ``logging`` section,
    which the root config holds once for every role (so its ``service`` section has none)."""

    logging: LoggingConfig = Field(LoggingConfig(), description="How the service logs, its access log too (core.logs).")


def load_settings(path: str | Path, *, env: Mapping[str, str] | None = None, **overrides: object) -> ServiceFile:
    """Settings from YAML, with ``overrides`` (e.g. --host/--port) and the token from ``env``."""
    env = os.environ if env is None else env
    p = Path(path)
    try:
        raw = yaml.safe_load(p.read_text()) or {}
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read config file: {exc.strerror}", detail={"file": str(p)}) from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{p}: invalid YAML: {exc}", detail={"file": str(p)}) from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{p}: top level must be a mapping", detail={"file": str(p)})
    if "admin_token" in raw:
        raise ConfigError(f"{p}: put the admin token in the environment (admin_token_env), not the file",
                          detail={"file": str(p), "keys": ["admin_token"]})
    raw.update({k: v for k, v in overrides.items() if v is not None})
    raw["admin_token"] = env.get(str(raw.get("admin_token_env", "STREAMREC_ADMIN_TOKEN")), "")
    return validate_config(raw, ServiceFile, str(p))
