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
from pydantic import Field, model_validator

from core.errors import ConfigError
from core.yaml_config import FrozenModel, validate_config

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

    kind: Literal["flat", "ivf", "hnsw"] = "flat"
    nlist: int = Field(1024, ge=1)
    nprobe: int = Field(16, ge=1)
    hnsw_m: int = Field(32, ge=4, le=128)
    hnsw_ef_search: int = Field(64, ge=1)
    # IVF: retrain (background rebuild, then swap) once this fraction of items changed since training
    rebuild_fraction: float = Field(0.25, gt=0.0)


class ReadThroughSettings(FrozenModel):
    """Optional live path to the PS shards: read-through for embedding lookups and the item vectors
    of changed and new items refreshed in the index between bundles (service.live_items)."""

    endpoints: list[str] = Field(min_length=1)  # the shards, in shard order (tcp://host:port)
    timeout_s: float = Field(0.05, gt=0.0)  # past this a lookup serves the bundle's rows
    secret_file: str | None = None  # the shards' HMAC secret, when they require one
    # the live path (service.live_items): changed items' vectors refreshed in the index between bundles
    live_items: bool = True
    items_interval_s: float = Field(0.1, gt=0.0)  # how often the shards' changed-keys logs are read
    items_batch: int = Field(4096, ge=1)  # items re-embedded and swapped into the index at once
    changes_limit: int = Field(65536, ge=1, le=1 << 18)  # keys read per shard per poll


class LimitSettings(FrozenModel):
    max_ids: int = Field(10_000, ge=1)
    max_k: int = Field(1000, ge=1)
    max_instances: int = Field(1000, ge=1)
    max_body_bytes: int = Field(8 << 20, ge=1024)
    body_timeout_s: float = Field(10.0, gt=0.0)  # each part of a request body must arrive within this
    max_connections: int = Field(1000, ge=1)  # open connections at once; past this new ones get 503


class ServiceSettings(FrozenModel):
    host: str = "127.0.0.1"
    port: int = Field(8080, ge=0, lt=65536)
    exports_dir: str
    poll_seconds: float = Field(2.0, gt=0.0)  # how often the export watcher looks for new bundles
    admin_token_env: str = "STREAMREC_ADMIN_TOKEN"
    admin_token: str = ""  # filled from admin_token_env by load_settings; empty: admin API disabled
    job_control: str | None = None  # the training job's control endpoint (tcp://host:port)
    # or: the control.json the chief trainer writes under train.checkpoint_dir, re-read on every
    # call, so the link follows whichever trainer holds rank 0 (leased ranks on Kubernetes)
    job_control_file: str | None = None
    job_timeout_s: float = Field(10.0, gt=0.0)
    # the cluster secret (the PS shards' HMAC key) when the job's control socket requires signed
    # requests: it does whenever the trainers have one, and always off loopback
    job_secret_file: str | None = None
    index: IndexSettings = IndexSettings()
    read_through: ReadThroughSettings | None = None
    limits: LimitSettings = LimitSettings()
    # a user none of whose ids has a row: the bundle's most liked items lately (service.cold_start),
    # or the towers' vector of nothing ("model")
    cold_start: Literal["popular", "model"] = "popular"

    @model_validator(mode="after")
    def _secure(self) -> ServiceSettings:
        if self.job_control is not None and self.job_control_file is not None:
            raise ValueError("set job_control or job_control_file, not both")
        if not is_loopback(self.host) and self.admin_token in DEFAULT_TOKENS:
            raise ValueError(f"host {self.host} is not loopback: set a non-default admin token in "
                             f"${self.admin_token_env}")
        return self


def load_settings(path: str | Path, *, env: Mapping[str, str] | None = None, **overrides: object) -> ServiceSettings:
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
    return validate_config(raw, ServiceSettings, str(p))
