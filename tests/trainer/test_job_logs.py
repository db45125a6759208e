"""A short real job's logs: the worker says where it started from, each pass it committed (records,
AUC, lag) and each bundle it exported, and the shard that it serves, saves and restores, every line
in the one format (UTC time, level, role, logger, message) with the role's name; in JSON lines
every line is one object."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from trainer.job_config import load_job_config

from .test_streaming_job import job_yaml, produce, wait_exit

pytestmark = pytest.mark.process

RECORDS = 2000  # two passes of 1000
LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (?:DEBUG|INFO |WARNING|ERROR) (\S+) (\S+): (.*)$")
COMMITTED = re.compile(r"^pass (\d+) committed: (\d+) records \((\d+) in all\), auc (0\.\d{4}), lag (\S+) records")


def _with_logging(path: Path, **logging: str) -> Path:
    data = yaml.safe_load(path.read_text())
    path.write_text(yaml.safe_dump({**data, "logging": logging}))
    return path


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_a_jobs_worker_and_shard_log_their_lifecycle_in_one_format(broker, cluster, tmp_path: Path, fmt: str) -> None:
    kafka = produce(broker.bootstrap, RECORDS)
    path = _with_logging(job_yaml(tmp_path, "run", kafka), format=fmt)
    cfg = load_job_config(path)
    c = cluster(cfg.model.table_configs())
    job = c.train(path, broker.bootstrap, extra=("--max-idle-s", "2"))
    assert wait_exit(job) == 0, c.procs.log_of(job)[-3000:]
    *lines, result = c.procs.log_of(job).splitlines()  # the last line is the job's result on stdout
    assert json.loads(result)["records_total"] == RECORDS
    if fmt == "json":
        objects = [json.loads(line) for line in lines]
        assert {o["role"] for o in objects} == {"worker.0"}
        assert [o for o in objects if o["level"] != "info" and not o["logger"].startswith("kafka.")] == []
        records = [(o["logger"], o["message"]) for o in objects]
        committed = [o for o in objects if o.get("records_total") is not None and "auc" in o]
        assert [(o["pass"], o["records"], o["records_total"]) for o in committed] == [(1, 1000, 1000),
                                                                                      (2, 1000, 2000)]
    else:
        parsed = [LINE.match(line) for line in lines]
        assert all(parsed), [line for line, m in zip(lines, parsed, strict=True) if m is None]
        assert {m.group(1) for m in parsed if m} == {"worker.0"}
        records = [(m.group(2), m.group(3)) for m in parsed if m]
    messages = [message for _, message in records]
    assert ("trainer.recovery", "no committed pass: training starts from scratch") in records
    passes = [m.groups() for message in messages if (m := COMMITTED.match(message))]
    assert [(n, r, total) for n, r, total, _, _ in passes] == [("1", "1000", "1000"), ("2", "1000", "2000")]
    assert all(0.5 < float(auc) < 1.0 for _, _, _, auc, _ in passes)
    exported = [message for logger, message in records if logger == "trainer.export"]
    assert exported[:2] == ["bundle 1 (base) of pass 1 exported: 0 items",
                            "bundle 2 (delta) of pass 2 exported: 0 items"]

    shard = [LINE.match(line) for line in c.procs.log_of(c.shards[0]).splitlines()]
    assert all(shard) and {m.group(1) for m in shard if m} == {"shard.0"}
    said = [m.group(3) for m in shard if m]
    assert any(s.startswith("shard 0 serving") for s in said)
    assert any(s.startswith("shard 0 saved") and "checkpoint" in s for s in said)
