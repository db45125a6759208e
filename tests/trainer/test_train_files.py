"""`streamrec train-files` end to end: shard and worker processes, a bad line counted (not fatal),
one prediction per test row, the JSON keys other systems' runs are compared on."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from logrecords.generator import PlantedModel
from logrecords.sample_encoding import write_dataset

pytestmark = pytest.mark.process

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("prefetch", ["thread", "process"])
def test_train_files_trains_evaluates_and_writes_predictions(tmp_path: Path, prefetch: str) -> None:
    model = PlantedModel(seed=4)
    train, test = tmp_path / "train.txt", tmp_path / "test.txt"
    write_dataset(str(train), model, 6000, fmt="criteo")
    write_dataset(str(test), model, 1500, fmt="criteo")
    with open(train, "ab") as f:
        f.write(b"1\tnot-a-number\tgarbage\n")  # malformed: counted and skipped
    preds = tmp_path / "preds.txt"
    argv = [sys.executable, "-m", "cli", "train-files", "--train", str(train), "--test", str(test),
            "--model", "wide_deep", "--embedding-dim", "4", "--mlp", "16,8", "--batch-size", "256",
            "--servers", "2", "--workers", "2", "--predictions", str(preds), "--work-dir", str(tmp_path / "job"),
            "--prefetch", prefetch, "--json"]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, timeout=300,
                          env={"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(out) >= {"train_rows", "train_seconds", "samples_per_s", "test_auc", "test_logloss", "peak_rss_mb"}
    assert out["train_rows"] == 6000 and out["test_rows"] == 1500
    assert 0.5 < out["test_auc"] < 1 and out["peak_rss_mb"] > 0
    p = np.loadtxt(preds)
    assert p.shape == (1500,) and np.all((p > 0) & (p < 1))
    result = json.loads((tmp_path / "job" / "results" / "result.json").read_text())
    assert sum(result["rejected"].values()) == 1
    assert {w["prefetch"] for w in result["workers"]} == {prefetch}
    # every shard's CPU during worker 0's loop: read from /proc (same host), no more than its whole life's
    loop, life = result["shard_loop_cpu_s"], result["shard_cpu_s"]
    assert len(loop) == len(life) == 2 and all(0 <= a <= b for a, b in zip(loop, life, strict=True))
    # the keys each shard served in training (read before the test pass): ids route to both
    assert len(result["shard_keys"]) == 2 and all(k > 0 for k in result["shard_keys"])


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_workers_with_unequal_batch_counts_finish_and_report_staleness(tmp_path: Path, mode: str) -> None:
    """24 batches over 5 workers: four take 5 steps, one 4; in sync mode each step is a barrier of all
    five, so the one with fewer batches joins the last barrier without one."""
    model = PlantedModel(seed=5)
    train, test = tmp_path / "train.txt", tmp_path / "test.txt"
    write_dataset(str(train), model, 6000, fmt="criteo")
    write_dataset(str(test), model, 500, fmt="criteo")
    argv = [sys.executable, "-m", "cli", "train-files", "--train", str(train), "--test", str(test),
            "--model", "wide_deep", "--embedding-dim", "4", "--mlp", "16,8", "--batch-size", "256",
            "--workers", "5", "--mode", mode, "--staleness-sample", "4",
            "--work-dir", str(tmp_path / "job"), "--json"]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, timeout=600,
                          env={"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads((tmp_path / "job" / "results" / "result.json").read_text())
    assert result["train_rows"] == 6000 and 0.5 < result["test_auc"] < 1
    # ranks 0-3 take 5 batches (rank 3's last one is 112 rows), rank 4 takes 4
    assert [w["records"] for w in result["workers"]] == [1280, 1280, 1280, 1136, 1024]
    if mode == "async":  # the shards followed 1 in 4 keys of the workers' pulls and pushes
        assert result["staleness"]["pushes"] > 0 and result["staleness"]["p50"] is not None
