"""`streamrec generate --skip N`: a resumed stream goes on instead of replaying the first
events (what `up` uses, so a restarted run does not train on events it already saw)."""

from __future__ import annotations

import json
from pathlib import Path

from cli.main import main


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_skip_goes_on_instead_of_replaying(tmp_path: Path) -> None:
    first, resumed = tmp_path / "first.jsonl", tmp_path / "resumed.jsonl"
    assert main(["generate", "--out", str(first), "--rows", "200", "--format", "json", "--seed", "5"]) == 0
    assert main(["generate", "--out", str(resumed), "--rows", "200", "--format", "json", "--seed", "5",
                 "--skip", "200"]) == 0
    a, b = _records(first), _records(resumed)
    assert a != b  # not a replay
    assert min(r["ts"] for r in b) > max(r["ts"] for r in a)  # its clock continues after the skipped events
