"""`streamrec train-files` merges the dense model as often as the streaming job by default (one
default, trainer.job_config's), and a merge interval below 1 is refused naming the flag."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from cli.main import main
from launcher.file_job import FileJob
from trainer.job_config import DEFAULT_DENSE_SYNC_STEPS, JobConfig


def test_the_file_job_merges_as_often_as_the_streaming_job() -> None:
    file_default = {f.name: f.default for f in dataclasses.fields(FileJob)}["dense_sync_steps"]
    assert file_default == JobConfig.model_fields["dense_sync_steps"].default == DEFAULT_DENSE_SYNC_STEPS
    # several merges in a short pass of many workers: the dense Adam's restart at a merge acts
    assert DEFAULT_DENSE_SYNC_STEPS < 64


def test_a_merge_interval_below_one_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "rows.txt"
    data.write_text("")
    assert main(["train-files", "--train", str(data), "--test", str(data), "--dense-sync-steps", "0"]) == 2
    assert "--dense-sync-steps must be >= 1, got 0" in capsys.readouterr().err


def test_the_file_job_takes_the_streaming_jobs_dense_parts_and_refuses_a_bad_flag(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    file_default = {f.name: f.default for f in dataclasses.fields(FileJob)}["dense_parts"]
    assert file_default == JobConfig.model_fields["dense_parts"].default == "auto"
    data = tmp_path / "rows.txt"
    data.write_text("")
    for bad in ("many", "0"):
        assert main(["train-files", "--train", str(data), "--test", str(data), "--dense-parts", bad]) == 2
        assert f"--dense-parts must be auto or an integer >= 1, got {bad!r}" in capsys.readouterr().err
