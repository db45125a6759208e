"""core.logs: one line format for every role (UTC time, level, role, logger, message), JSON lines
on request, the request id within a service request, a second configure replacing the first, and
the `logging:` section read from any streamrec YAML."""

from __future__ import annotations

import io
import json
import logging
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.errors import ConfigError
from core.logs import LogFormat, LoggingConfig, LogLevel, configure, load_logging_section, request_id, set_role

TEXT_LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (DEBUG|INFO |WARNING|ERROR) (\S+) (\S+): (.*)$")


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for h in list(root.handlers):
        if h not in handlers:
            root.removeHandler(h)
            h.close()
    root.setLevel(level)
    logging.getLogger("kafka").setLevel(logging.NOTSET)


def test_text_lines_carry_utc_time_level_role_logger_and_message() -> None:
    out = io.StringIO()
    configure(role="worker.3", stream=out)
    logging.getLogger("trainer.pass_commit").info("pass %d committed", 7)
    logging.getLogger("trainer.job").debug("not at info")
    (line,) = out.getvalue().splitlines()
    m = TEXT_LINE.match(line)
    assert m is not None, line
    assert m.groups() == ("INFO ", "worker.3", "trainer.pass_commit", "pass 7 committed")


def test_a_traceback_follows_its_line_and_the_request_id_is_appended() -> None:
    out = io.StringIO()
    configure(role="service", stream=out)
    token = request_id.set("abc123")
    try:
        try:
            raise ValueError("boom")
        except ValueError:
            logging.getLogger("streamrec.service").exception("unhandled error on GET /x")
    finally:
        request_id.reset(token)
    first, *rest = out.getvalue().splitlines()
    assert first.endswith("unhandled error on GET /x request_id=abc123")
    assert rest[0].startswith("Traceback") and rest[-1] == "ValueError: boom"


def test_json_lines_parse_one_object_each_with_fields_and_exception() -> None:
    out = io.StringIO()
    configure(role="shard.1", config=LoggingConfig(format=LogFormat.JSON), stream=out)
    log = logging.getLogger("ps.shard_server")
    log.info("shard %d serving", 1, extra={"fields": {"port": 5555, "message": "not overriding"}})
    try:
        1 / 0  # noqa: B018
    except ZeroDivisionError:
        log.exception("failed\nover two lines")
    lines = out.getvalue().splitlines()
    assert len(lines) == 2
    first, second = (json.loads(line) for line in lines)
    assert first["role"] == "shard.1" and first["level"] == "info" and first["logger"] == "ps.shard_server"
    assert first["message"] == "shard 1 serving" and first["port"] == 5555
    assert re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$", first["ts"])
    assert second["message"] == "failed\nover two lines" and "ZeroDivisionError" in second["exc"]


def test_configure_again_replaces_the_handler_and_the_role_can_change() -> None:
    first, second = io.StringIO(), io.StringIO()
    configure(role="worker", stream=first)
    configure(role="worker", config=LoggingConfig(level=LogLevel.WARNING), stream=second)
    set_role("worker.1")
    log = logging.getLogger("trainer.rank_claim")
    log.info("dropped at warning")
    log.warning("kept")
    assert first.getvalue() == ""
    (line,) = second.getvalue().splitlines()
    assert TEXT_LINE.match(line).group(2) == "worker.1"  # type: ignore[union-attr]


def test_chatty_libraries_are_held_at_warning_unless_debugging(tmp_path: Path) -> None:
    path = tmp_path / "logs" / "up.log"
    configure(role="up", path=path)
    logging.getLogger("kafka.conn").info("connecting to broker")
    logging.getLogger("kafka.net.selector").warning("Task ran for 0.157s (>0.100s threshold)")  # a busy host only
    logging.getLogger("kafka.conn").warning("connection to broker lost")
    cancelled = type("Cancelled", (Exception,), {})
    logging.getLogger("kafka.cluster").error("Metadata refresh: failed %s", cancelled())  # a client closed mid-refresh
    logging.getLogger("kafka.cluster").error("Metadata refresh: failed %s", TimeoutError("no answer"))
    logging.getLogger("tests.core.up").info("worker.0 started")  # a logger no other test's dictConfig disabled
    said = [TEXT_LINE.match(x).group(3) for x in path.read_text().splitlines()]  # type: ignore[union-attr]
    assert said == ["kafka.conn", "kafka.cluster", "tests.core.up"]
    configure(role="up", config=LoggingConfig(level=LogLevel.DEBUG), path=path)
    logging.getLogger("kafka.conn").info("connecting to broker")
    assert "connecting to broker" in path.read_text().splitlines()[-1]


def test_the_logging_section_of_any_yaml(tmp_path: Path) -> None:
    assert load_logging_section(None) == LoggingConfig()
    role_file = tmp_path / "train.yaml"
    role_file.write_text("model: {type: lr}\nlogging: {format: json, access_sample: 0.25}\n")
    assert load_logging_section(role_file) == LoggingConfig(format=LogFormat.JSON, access_sample=0.25)
    (tmp_path / "none.yaml").write_text("kafka: {}\n")
    assert load_logging_section(tmp_path / "none.yaml") == LoggingConfig()
    # a file the command cannot read: its own loader says so next, in its words
    assert load_logging_section(tmp_path / "missing.yaml") == LoggingConfig()
    (tmp_path / "bad.yaml").write_text("logging: {format: xml}\n")
    with pytest.raises(ConfigError, match=r"logging.*format"):
        load_logging_section(tmp_path / "bad.yaml")
