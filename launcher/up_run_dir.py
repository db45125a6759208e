"""The run directory of `streamrec up`: everything one run leaves on disk, so that a second `up`
in the same directory resumes where the first stopped.

    <run_dir>/streamrec.yaml   the effective root config (the brokers actually used; no admin token)
    <run_dir>/roles/*.yaml     one config per role (service, train, ps), written from it
    <run_dir>/logs/<role>.log  one log per process
    <run_dir>/admin-token      the admin API's token (0600), kept so a restart reuses it
    <run_dir>/ps-secret        the shards' HMAC secret (0600), new for every run
    checkpoints and exports    where the config says, relative paths under the run directory
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from core.errors import StreamrecError
from launcher.system_config import StreamrecConfig, resolve_root, write_role_files
from stores.store import open_store


@dataclass(frozen=True)
class RunDir:
    """The paths of one run directory (``root`` is absolute)."""

    root: Path

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def roles(self) -> Path:
        return self.root / "roles"

    @property
    def config(self) -> Path:
        return self.root / "streamrec.yaml"

    def log(self, role: str) -> Path:
        return self.logs / f"{role}.log"


def admin_token(run_dir: Path) -> str:
    """The run's admin token: kept in ``<run_dir>/admin-token`` (0600) so restarts reuse it."""
    path = run_dir / "admin-token"
    if path.is_file():
        return path.read_text().strip()
    token = secrets.token_urlsafe(24)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    return token


PS_SECRET_BYTES = 32


def ps_secret(run_dir: Path) -> Path:
    """A new random PS secret for this run in ``<run_dir>/ps-secret`` (0600 from its creation):
    the shards refuse every request not signed with it, so no other local user can stop them or
    make them save. The shards, trainers and the service's read-through read the file."""
    path = run_dir / "ps-secret"
    tmp = run_dir / ".ps-secret.tmp"
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(PS_SECRET_BYTES) + "\n")
    tmp.replace(path)
    return path


def write_run_configs(cfg: StreamrecConfig, run: RunDir, *, bootstrap: str, control_endpoint: str,
                      secret_file: Path, shard_endpoints: Sequence[str]) -> None:
    """``<run_dir>/streamrec.yaml`` and the role files, pointing at ``bootstrap``, the chief's
    control endpoint, the run's PS secret and its shards: a configured ``service.read_through``
    reads from this run's shards (``shard_endpoints``, on ports `up` picked), whatever endpoints
    the file names."""
    servers = bootstrap.split(",")
    effective = cfg.model_dump(mode="json", by_alias=True, exclude={"service": {"admin_token"}})
    effective["kafka"]["bootstrap_servers"] = servers
    run.config.write_text(yaml.safe_dump(effective, sort_keys=False))
    # `up` knows where its chief listens: a control file from a Kubernetes-style config is not used
    overrides = {"host": cfg.up.host, "port": cfg.up.port, "job_control": control_endpoint,
                 "job_control_file": None, "job_secret_file": str(secret_file)}  # the chief signs with it
    if cfg.service.read_through is not None:  # the shards require this run's secret
        overrides["read_through"] = {**cfg.service.read_through.model_dump(mode="json"),
                                     "endpoints": list(shard_endpoints), "secret_file": str(secret_file)}
    kafka = {**cfg.kafka.model_dump(mode="json"), "bootstrap_servers": servers}
    write_role_files(cfg, run.roles, base=run.root, overrides=overrides,
                     train_overrides={"control_endpoint": control_endpoint, "kafka": kafka})


def records_trained(cfg: StreamrecConfig, run_dir: Path) -> int:
    """Records the last committed pass had trained on: a resumed run's generator continues
    the stream after them instead of replaying events the model already saw."""
    from trainer import checkpoints

    try:
        root = open_store(resolve_root(cfg.train.checkpoint_dir, run_dir))  # a path or a URL
        done = checkpoints.complete_passes(root)
        return int(checkpoints.read_pass(root, done[-1]).get("records_total", 0)) if done else 0
    except StreamrecError:
        return 0  # an unreadable pass: the trainers will say so; the stream starts over


def shard_checkpoints(cfg: StreamrecConfig, run_dir: Path) -> Path:
    """Where the shards save their tables: beside the job's checkpoints, or in the run directory
    when those live in an object store (the shards write local files)."""
    checkpoints = resolve_root(cfg.train.checkpoint_dir, run_dir)
    if "://" in checkpoints:
        checkpoints = str(run_dir / "checkpoints")
    return Path(checkpoints) / "shards"
