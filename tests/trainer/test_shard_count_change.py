"""A pass restored by another number of PS shards than wrote it: the rows are placed again,
none is lost or doubled, or the restore is refused naming both counts."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from core.errors import Conflict
from ps.admin import SaveMode
from ps.client import PSClient
from tests.ps.ps_harness import shard_processes
from trainer import checkpoints
from trainer.metrics import Metrics
from trainer.pass_commit import CommitFinisher, finish_pass
from trainer.recovery import restore

TABLES = [{"name": "emb", "dim": 4, "optimizer": {"kind": "sgd", "lr": 1.0}, "initializer": {"kind": "zeros"}}]
KEYS = np.arange(1, 3001, dtype=np.uint64)


def _write_pass(tmp: Path, root: Path, n_shards: int) -> None:
    with shard_processes(tmp / f"write-{n_shards}", TABLES, n_shards) as shards, \
            PSClient(shards.endpoints) as c:
        finisher = CommitFinisher(PSClient(shards.endpoints))
        c.wait(c.push("emb", KEYS, np.ones((KEYS.shape[0], 4), np.float32)))
        part = {f"metrics.{k}": v for k, v in Metrics().to_arrays().items()}
        checkpoints.write_worker_part(root, 1, 0, part, {"rank": 0, "offsets": {"0": 10}, "records": 1})
        saves = c.admin.save(into=checkpoints.shard_template(root, 1), mode=SaveMode.BASE, detach=True)
        finisher.start(lambda client: finish_pass(client, root, 1, saves, [0], keep=5, fields={}))
        finisher.wait()
        finisher.close()


@pytest.mark.process
@pytest.mark.parametrize("restored_shards", [1, 3])
def test_a_pass_restored_by_another_shard_count_is_refused_naming_both(tmp_path: Path, restored_shards: int) -> None:
    root = tmp_path / "ckpt"
    (tmp_path / "write-2").mkdir()
    _write_pass(tmp_path, root, 2)
    (tmp_path / "read").mkdir()
    with shard_processes(tmp_path / "read", TABLES, restored_shards) as shards, PSClient(shards.endpoints) as c:
        with pytest.raises(Conflict, match=f"written by 2 PS shards but this job runs {restored_shards}"):
            restore(root, c, rank=0, chief=True)
        assert not c.wait(c.pull_existing("emb", KEYS)).found.any()  # nothing loaded, not a part
