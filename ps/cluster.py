"""Who am I in the parameter-server cluster: roles from the environment.

Our variables (set by ``streamrec launch``; every one documented here):

- ``STREAMREC_ROLE``: ``server`` or ``worker``
- ``STREAMREC_RANK``: index within the role (shard index for a server), default 0; ``auto``
  (workers only): claim a rank as a lease on shard 0 (:mod:`ps.rank_leases`), so workers
  need no stable identity (a Kubernetes Deployment)
- ``STREAMREC_RANK_LEASE_TTL``: seconds a claimed rank outlives its holder's last renewal
  (default 15; setting it without ``STREAMREC_RANK`` also means ``auto``)
- ``STREAMREC_HOLDER_ID``: who holds the lease (default ``<hostname>:<pid>``: the pod name)
- ``STREAMREC_ADVERTISE_HOST``: the host other processes reach this one at (Kubernetes: the
  pod IP); the chief publishes its job-control endpoint with it (``<checkpoint_dir>/control.json``)
- ``STREAMREC_SHARD_ENDPOINTS``: comma-separated shard endpoints, shard order (``tcp://host:port``
  or ``host:port``)
- ``STREAMREC_NUM_WORKERS``: number of workers (sync-mode barriers wait for all of them)
- ``STREAMREC_PS_MODE``: ``async`` (default), ``sync`` or ``geo``
- ``STREAMREC_GEO_STEPS``: geo mode pushes its deltas every this many steps (default 10)
- ``STREAMREC_PS_CONFIG``: path of the PS YAML (tables served; see :mod:`ps.ps_config`)
- ``STREAMREC_PS_SECRET_FILE``: file holding the shared HMAC secret (required off loopback)
- ``STREAMREC_CHECKPOINT_DIR``: where shards save and restore

Or TensorFlow's ``TF_CONFIG``, accepted as is: ``{"cluster": {"ps": [...], "worker": [...],
"chief": [...]}, "task": {"type": "worker", "index": 0}}``. ``ps`` tasks are our servers (in
order); the chief is worker 0 and ``worker`` task ``i`` is worker ``i + len(chief)``. Our
``STREAMREC_PS_*`` variables still apply on top of TF_CONFIG (mode, config, secret).
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field

from core.errors import ConfigError
from core.yaml_config import FrozenModel, validate_config
from ps.auth import read_secret

Mode = Literal["async", "sync", "geo"]


class ClusterSpec(FrozenModel):
    role: Literal["server", "worker"]
    rank: int = Field(0, ge=0)
    shard_endpoints: tuple[str, ...] = Field(min_length=1)
    num_workers: int = Field(1, ge=1)
    mode: Mode = "async"
    geo_steps: int = Field(10, ge=1)
    ps_config: str | None = None
    secret_file: str | None = None
    checkpoint_dir: str | None = None
    rank_lease_ttl_s: float | None = Field(None, gt=0.0, le=3600.0)  # set: the rank is claimed, not given
    holder_id: str | None = None
    advertise_host: str | None = None

    @property
    def leased_rank(self) -> bool:
        return self.rank_lease_ttl_s is not None

    def holder(self) -> str:
        return self.holder_id or f"{socket.gethostname()}:{os.getpid()}"

    def secret(self) -> bytes | None:
        return read_secret(self.secret_file) if self.secret_file is not None else None


def normalize_endpoint(address: str) -> str:
    address = address.strip()
    if "://" in address:
        return address
    if ":" not in address:
        raise ConfigError(f"endpoint {address!r} needs a port (host:port)")
    return f"tcp://{address}"


def _number(env: Mapping[str, str], name: str, kind: type, what: str) -> Any:
    raw = env.get(name)
    if raw is None or raw == "":
        return None
    try:
        return kind(raw)
    except ValueError:
        raise ConfigError(f"{name} must be {what}, got {raw!r}") from None


def _int(env: Mapping[str, str], name: str, default: int) -> int:
    value = _number(env, name, int, "an integer")
    return default if value is None else value


def _common(env: Mapping[str, str]) -> dict:
    return {
        "mode": env.get("STREAMREC_PS_MODE", "async"),
        "geo_steps": _int(env, "STREAMREC_GEO_STEPS", 10),
        "ps_config": env.get("STREAMREC_PS_CONFIG") or None,
        "secret_file": env.get("STREAMREC_PS_SECRET_FILE") or None,
        "checkpoint_dir": env.get("STREAMREC_CHECKPOINT_DIR") or None,
        "advertise_host": env.get("STREAMREC_ADVERTISE_HOST") or None,
    }


DEFAULT_LEASE_TTL_S = 15.0


def _rank(env: Mapping[str, str]) -> tuple[int, float | None]:
    """(rank, lease ttl): ``STREAMREC_RANK=auto``, or a ttl and no rank, means a claimed rank."""
    ttl = _number(env, "STREAMREC_RANK_LEASE_TTL", float, "a number of seconds")
    raw = env.get("STREAMREC_RANK", "").strip()
    if raw == "auto" or (raw == "" and ttl is not None):
        if env["STREAMREC_ROLE"] != "worker":
            raise ConfigError("STREAMREC_RANK=auto is for workers; a shard's index is fixed")
        return 0, DEFAULT_LEASE_TTL_S if ttl is None else ttl
    return _int(env, "STREAMREC_RANK", 0), None


def _from_ours(env: Mapping[str, str]) -> ClusterSpec:
    endpoints = [e for e in env.get("STREAMREC_SHARD_ENDPOINTS", "").split(",") if e.strip()]
    rank, ttl = _rank(env)
    data = {
        "role": env["STREAMREC_ROLE"],
        "rank": rank,
        "shard_endpoints": tuple(normalize_endpoint(e) for e in endpoints),
        "num_workers": _int(env, "STREAMREC_NUM_WORKERS", 1),
        "rank_lease_ttl_s": ttl,
        "holder_id": env.get("STREAMREC_HOLDER_ID") or None,
        **_common(env),
    }
    return validate_config(data, ClusterSpec, "STREAMREC_* environment")


def _from_tf_config(raw: str, env: Mapping[str, str]) -> ClusterSpec:
    try:
        tf = json.loads(raw)
        cluster, task = tf["cluster"], tf["task"]
        kind, index = task["type"], int(task.get("index", 0))
        ps = list(cluster.get("ps", []))
        chiefs = list(cluster.get("chief", []))
        workers = list(cluster.get("worker", []))
    except (json.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ConfigError(f"TF_CONFIG is not a valid cluster spec: {exc}") from None
    if kind == "ps":
        role, rank = "server", index
    elif kind == "chief":
        role, rank = "worker", index
    elif kind == "worker":
        role, rank = "worker", index + len(chiefs)
    else:
        raise ConfigError(f"TF_CONFIG task type {kind!r} is not supported (use ps, chief or worker)")
    data = {
        "role": role,
        "rank": rank,
        "shard_endpoints": tuple(normalize_endpoint(e) for e in ps),
        "num_workers": max(1, len(chiefs) + len(workers)),
        **_common(env),
    }
    return validate_config(data, ClusterSpec, "TF_CONFIG")


def cluster_from_env(env: Mapping[str, str] | None = None) -> ClusterSpec:
    """The cluster spec from ``STREAMREC_ROLE`` & co., else from ``TF_CONFIG``."""
    env = os.environ if env is None else env
    if env.get("STREAMREC_ROLE"):
        return _from_ours(env)
    if env.get("TF_CONFIG"):
        return _from_tf_config(env["TF_CONFIG"], env)
    raise ConfigError("no cluster spec in the environment: set STREAMREC_ROLE (and friends) or TF_CONFIG")


def cluster_env(spec: ClusterSpec) -> dict[str, str]:
    """The ``STREAMREC_*`` variables describing ``spec`` (what the launcher exports)."""
    env = {
        "STREAMREC_ROLE": spec.role,
        "STREAMREC_RANK": "auto" if spec.leased_rank else str(spec.rank),
        "STREAMREC_SHARD_ENDPOINTS": ",".join(spec.shard_endpoints),
        "STREAMREC_NUM_WORKERS": str(spec.num_workers),
        "STREAMREC_PS_MODE": spec.mode,
        "STREAMREC_GEO_STEPS": str(spec.geo_steps),
    }
    ttl = None if spec.rank_lease_ttl_s is None else str(spec.rank_lease_ttl_s)
    for key, value in (("STREAMREC_PS_CONFIG", spec.ps_config), ("STREAMREC_PS_SECRET_FILE", spec.secret_file),
                       ("STREAMREC_CHECKPOINT_DIR", spec.checkpoint_dir), ("STREAMREC_RANK_LEASE_TTL", ttl),
                       ("STREAMREC_HOLDER_ID", spec.holder_id), ("STREAMREC_ADVERTISE_HOST", spec.advertise_host)):
        if value is not None:
            env[key] = value
    return env
