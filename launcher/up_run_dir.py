"""The run directory of `streamrec up`: everything one run leaves on disk, so that a second `up`
in the same directory resumes where the first stopped.

    <run_dir>/streamrec.yaml   the effective root config (the brokers actually used; no admin token)
    <run_dir>/roles/*.yaml     one config per role (service, train, ps), written from it
    <run_dir>/logs/<role>.log  one log per process
    <run_dir>/admin-token      the admin API's token (0600), kept so a restart reuses it
    <run_dir>/ps-secret        the shards' HMAC secret (0600), new for every run
    <run_dir>/up.lock          held (flock) by the `up` running there; names its pid and host
    checkpoints and exports    where the config says, relative paths under the run directory
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import socket
import stat
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from core.errors import ConfigError, Conflict, StreamrecError
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


LOCK_FILE = "up.lock"


class RunLock:
    """The run directory's lock: one `up` per directory, since a second one would replace the PS
    secret and interleave passes and bundles with the first's. An exclusive ``flock`` on
    ``<run_dir>/up.lock``, held as long as this process lives (the kernel drops it when the
    process dies, also on ``kill -9``, so a stale file never blocks), and a line in it naming the
    owner for the refusal's message."""

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / LOCK_FILE
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise ConfigError(f"cannot open the run directory's lock {self.path}: {exc.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = os.pread(fd, 512, 0).decode(errors="replace").strip() or "an unknown process"
            os.close(fd)
            raise Conflict(f"run directory {run_dir} is in use by another streamrec up ({owner}); stop it "
                           f"first or give this one another --run-dir") from None
        self._fd: int | None = fd
        line = f"pid {os.getpid()} on {socket.gethostname()}, since {time.strftime('%Y-%m-%d %H:%M:%S %Z')}\n"
        os.ftruncate(fd, 0)
        os.pwrite(fd, line.encode(), 0)

    def release(self) -> None:
        """Unlock (the file stays: removing it would let two processes lock two different files)."""
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, 0)
            os.close(self._fd)  # closing the last descriptor releases the flock
            self._fd = None


def _regular_file(path: Path, what: str) -> bool:
    """True when ``path`` is a regular file, False when it does not exist; anything else there
    (a directory, a socket) is refused, naming the path."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise ConfigError(f"cannot read {what} {path}: {exc.strerror}") from None
    if not stat.S_ISREG(mode):
        kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file"
        raise ConfigError(f"{what} {path} is {kind}; remove it (`up` writes a new one)")
    return True


def admin_token(run_dir: Path) -> str:
    """The run's admin token: kept in ``<run_dir>/admin-token`` (0600) so restarts reuse it. A kept
    token must be printable ASCII without spaces (it goes into an HTTP header) and not empty (the
    service would take an empty token for no admin API at all)."""
    path = run_dir / "admin-token"
    if _regular_file(path, "the admin token file"):
        try:
            raw = path.read_bytes()
        except OSError as exc:
            raise ConfigError(f"cannot read the admin token file {path}: {exc.strerror}") from None
        token = raw.strip()
        fix = "write a token there (printable ASCII, no spaces) or delete the file for a new one"
        if not token:
            raise ConfigError(f"the admin token file {path} is empty, which would turn the admin API off; {fix}")
        if not (token.isascii() and token.decode().isprintable()) or b" " in token:
            raise ConfigError(f"the admin token file {path} holds {len(raw)} bytes that are not a token; {fix}")
        return token.decode()
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
    _regular_file(path, "the PS secret file")
    _regular_file(tmp, "the PS secret's temporary file")
    try:
        tmp.unlink(missing_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(PS_SECRET_BYTES) + "\n")
        tmp.replace(path)
    except OSError as exc:
        raise ConfigError(f"cannot write the PS secret file {path}: {exc.strerror}") from None
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
    tmp = run.config.with_name(f".{run.config.name}.tmp")  # whole, for a role reading it as it is written again
    tmp.write_text(yaml.safe_dump(effective, sort_keys=False))
    tmp.replace(run.config)
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
