"""Ctrl-C commits the final pass for real: with a table large enough that its save takes a while
(every pass a base of a million-row table), the pass `up` reports committed has its ``pass.json``,
every file it names verifies, and a second `up` restores it. The trainers stop on SIGTERM with time
to finish the save, not SIGKILL as the pass's workers are released."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import yaml

from ps.auth import read_secret
from ps.client import PSClient
from ps.ps_config import load_ps_config
from trainer import checkpoints

from .conftest import SMALL_UP
from .test_up_e2e import Up, run_processes

pytestmark = pytest.mark.process

ROWS = 1_000_000  # rows added to the table before Ctrl-C: tens of MB in every save
CONFIG = {**SMALL_UP,
          # every pass saves the whole table (a base), so the final one is as slow as any; long passes,
          # so that the one running at Ctrl-C has records and becomes the final pass
          "train": {**SMALL_UP["train"], "passes": {"seconds": 8, "records": None, "base_every": 1}},
          "up": {**SMALL_UP["up"], "commit_on_exit": True}}


def start(tmp_path: Path, start_up: Callable[..., Up]) -> Up:
    """`start_up`'s `up` (stopped after the test whatever happens) on this test's config."""
    (tmp_path / "streamrec.yaml").write_text(yaml.safe_dump(CONFIG))
    return start_up()


def grow_the_table(up: Up) -> None:
    """Add ROWS rows to the model's table through the shards' own client (signed with the run's secret)."""
    found = up.wait_for("the shards", lambda: re.search(r"shards up at (\S+);", up.log.read_text()))
    table = load_ps_config(up.run_dir / "roles" / "ps.yaml").tables[0]
    rng = np.random.default_rng(7)
    step = 100_000
    with PSClient(found.group(1).split(","), secret=read_secret(up.run_dir / "ps-secret")) as client:
        for _ in range(ROWS // step):
            keys = rng.integers(1 << 40, 1 << 62, step, dtype=np.uint64)
            client.wait(client.push(table.name, keys, np.zeros((step, table.width), np.float32), unique=True))


def test_ctrl_c_reports_committed_only_a_pass_whose_manifest_is_written(tmp_path: Path,
                                                                          start_up: Callable[..., Up]) -> None:
    up = start(tmp_path, start_up)
    up.wait_for("a pass committed", lambda: (up.job().get("pass") or 0) >= 1)
    grow_the_table(up)
    up.wait_for("records in the running pass", lambda: up.job()["heartbeat"]["pass_records"] > 0)
    assert up.ctrl_c() == 0, up.output()
    said = up.output()
    # committed; or, if a pass ended just before Ctrl-C and nothing came after, skipped (nothing is lost)
    final = re.search(r"final pass (?:committed: pass|skipped: nothing trained since pass) (\d+)", said)
    assert final and "NOT committed" not in said, said
    n = int(final.group(1))
    root = up.run_dir / "checkpoints"
    assert (checkpoints.pass_dir(root, n) / checkpoints.MANIFEST).is_file(), said
    manifest = checkpoints.read_pass(root, n)  # every file it names is there with its size and checksum
    assert manifest["pass"] == n and all(m == "base" for m in manifest["shard_modes"])
    assert run_processes(up.run_dir) == []

    again = start(tmp_path, start_up)  # restores the reported pass: the newest complete one
    again.wait_for(f"pass {n} restored", lambda: (again.job().get("pass") or 0) >= n)
    assert n in [p["pass"] for p in again.get("/admin/passes", admin=True) if "pass" in p]
    assert again.ctrl_c() == 0, again.output()
    assert run_processes(again.run_dir) == []
