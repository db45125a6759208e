"""Every role's log in one format: ``configure(role=..., config=...)`` once per process.

A line is the UTC time, the level, the role (``worker.0``, ``shard.1``, ``service``, ``up``),
the logger and the message, as text::

    2026-11-28T04:15:02.123Z INFO  worker.0 trainer.pass_commit: pass 3 committed: ...

or, with ``format: json``, one JSON object per line (``ts``, ``level``, ``role``, ``logger``,
``message``, ``request_id`` inside a service request, ``exc`` with a traceback, and the
record's ``fields`` mapping when it has one). Every ``streamrec`` command that runs a role
calls :func:`configure` (cli/main.py) with the ``logging:`` section of the YAML it reads, so
``up``, docker-compose and Kubernetes roles log alike. Libraries that chatter at info (the
Kafka client, faiss's loader) are held at warning unless the level is debug.
"""

from __future__ import annotations

import contextvars
import json
import logging
import sys
import time
from enum import StrEnum
from pathlib import Path
from typing import IO, Any

import yaml
from pydantic import Field

from core.yaml_config import FrozenModel, validate_config


class LogLevel(StrEnum):
    DEBUG = "debug"
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


class LogFormat(StrEnum):
    TEXT = "text"
    JSON = "json"


class LoggingConfig(FrozenModel):
    """How a role logs (module docstring); the service also writes an access log."""

    level: LogLevel = Field(LogLevel.INFO, description="The lowest level written: debug, info, warning or error.")
    format: LogFormat = Field(LogFormat.TEXT,
                              description="`text`: one line per record; `json`: one JSON object per line.")
    access_log: bool = Field(True, description="The service logs each request (method, path, status, duration, "
                                               "request id).")
    access_sample: float = Field(1.0, ge=0.0, le=1.0,
                                 description="Fraction of the service's successful requests (status < 400) the access "
                                             "log writes; every failed one is written.")
    access_queue_lines: int = Field(10_000, ge=1,
                                    description="Access-log lines waiting for the service's log writer at most; a "
                                                "request finding them all taken drops its line (counted in "
                                                "streamrec_access_log_dropped_total) and never waits.")


# Libraries whose info lines are per connection or per load, not a role's life.
QUIET_LIBRARIES = ("kafka", "faiss", "numba", "urllib3", "botocore", "aiobotocore", "s3fs", "fsspec", "asyncio",
                   "httpx", "multipart")

# Loggers whose warnings only say that a machine is busy (kafka-python's "Task ran for 0.15 s, blocking the
# event loop" on a loaded host): written at debug only.
TIMING_WARNERS = ("kafka.net.selector",)

request_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("request_id", default=None)
"""The id of the service request being handled (set by service.access_log), written on each of its lines."""

_state = {"role": "streamrec"}


def _timestamp(created: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created)) + f".{int(created % 1 * 1000):03d}Z"


def text_line(created: float, level: str, logger: str, message: str, rid: str | None) -> str:
    """One line of the text format, without a traceback or the newline."""
    line = f"{_timestamp(created)} {level:<5} {_state['role']} {logger}: {message}"
    return line if rid is None else f"{line} request_id={rid}"


def json_object(created: float, level: str, logger: str, message: str, rid: str | None,
                fields: dict[str, Any] | None) -> dict[str, Any]:
    """One line of the JSON format as an object, without a traceback."""
    obj: dict[str, Any] = {"ts": _timestamp(created), "level": level.lower(), "role": _state["role"],
                           "logger": logger, "message": message}
    if rid is not None:
        obj["request_id"] = rid
    if fields:
        obj.update({k: v for k, v in fields.items() if k not in obj})
    return obj


class TextFormatter(logging.Formatter):
    """``<UTC time> <LEVEL> <role> <logger>: <message>`` (`` request_id=...`` within a request)."""

    def format(self, record: logging.LogRecord) -> str:
        line = text_line(record.created, record.levelname, record.name, record.getMessage(),
                         getattr(record, "request_id", None) or request_id.get())
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        elif record.stack_info:
            line += "\n" + self.formatStack(record.stack_info)
        return line


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line (a traceback goes into ``exc``)."""

    def format(self, record: logging.LogRecord) -> str:
        fields = getattr(record, "fields", None)
        obj = json_object(record.created, record.levelname, record.name, record.getMessage(),
                          getattr(record, "request_id", None) or request_id.get(),
                          fields if isinstance(fields, dict) else None)
        if record.exc_info:
            obj["exc"] = self.formatException(record.exc_info)
        return json.dumps(obj, default=str)


class _RoleHandler(logging.StreamHandler):
    """The handler :func:`configure` installs on the root logger (and replaces on a second call)."""


def configure(*, role: str, config: LoggingConfig | None = None, path: Path | None = None,
              stream: IO[str] | None = None) -> None:
    """Send every logger's records at ``config.level`` and above to ``path`` (appended) or
    ``stream`` (default stderr) in ``config.format``, as ``role``. A second call replaces the first."""
    config = config or LoggingConfig()
    set_role(role)
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _RoleHandler)]:
        root.removeHandler(old)
        if old.stream not in (sys.stderr, sys.stdout):
            old.close()
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        # line-buffered: a line is in the file once logged, as an operator tailing it expects
        stream = open(path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115 - the handler owns it
    handler = _RoleHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter() if config.format is LogFormat.JSON else TextFormatter())
    root.addHandler(handler)
    level = logging.getLevelNamesMapping()[config.level.upper()]
    root.setLevel(level)
    for name in QUIET_LIBRARIES:
        logging.getLogger(name).setLevel(max(level, logging.WARNING) if level > logging.DEBUG else logging.NOTSET)
    for name in TIMING_WARNERS:
        logging.getLogger(name).setLevel(max(level, logging.ERROR) if level > logging.DEBUG else logging.NOTSET)
    cluster = logging.getLogger("kafka.cluster")
    if _cancelled_by_close not in cluster.filters:
        cluster.addFilter(_cancelled_by_close)


def _cancelled_by_close(record: logging.LogRecord) -> bool:
    """False for kafka-python's ERROR "Metadata refresh: failed Cancelled": a refresh in flight when
    the client was closed (every regroup and stop closes one), not a failure of the cluster."""
    return not (record.msg == "Metadata refresh: failed %s" and record.args
                and type(record.args[0]).__name__ == "Cancelled")  # type: ignore[index]


def role_handler() -> logging.StreamHandler | None:
    """The handler :func:`configure` installed (None before it is called): writers of
    preformatted lines write to its stream under its lock, so lines never interleave."""
    return next((h for h in logging.getLogger().handlers if isinstance(h, _RoleHandler)), None)


def set_role(role: str) -> None:
    """The role written on every line from now on (a trainer learns its rank after its lease)."""
    _state["role"] = role


def load_logging_section(path: str | Path | None) -> LoggingConfig:
    """The ``logging:`` section of any streamrec YAML (the root or a role's file); defaults
    when ``path`` is None or the file has none."""
    if path is None:
        return LoggingConfig()
    try:
        loaded = yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError):
        return LoggingConfig()  # the command reads the file next and names what is wrong in its own words
    if not isinstance(loaded, dict):
        return LoggingConfig()
    return validate_config(loaded.get("logging") or {}, LoggingConfig, f"{path}:logging")
