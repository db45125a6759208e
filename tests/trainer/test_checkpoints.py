"""Pass commits are atomic (a process killed mid-commit leaves the previous pass the newest
complete one), corrupt passes are refused by name, and pruning keeps what deltas need."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from core.atomic_files import write_json
from core.errors import CorruptData
from trainer import checkpoints
from trainer.recovery import newest_usable_pass

# A child that commits passes forever, each with a few MB of worker arrays and a fake shard part.
_COMMITTER = r"""
import sys
import numpy as np
from pathlib import Path
from core.atomic_files import write_json
from trainer import checkpoints
root = Path(sys.argv[1])
checkpoints.discard_incomplete(root)
done = checkpoints.complete_passes(root)
n = done[-1] + 1 if done else 1
rng = np.random.default_rng(n)
while True:
    checkpoints.write_worker_part(root, n, 0, {"opt.m": rng.random(1_500_000, dtype=np.float32)},
                                  {"rank": 0, "offsets": {"0": n * 100}, "records": 100})
    part = checkpoints.pass_dir(root, n) / "shard-0"
    part.mkdir(parents=True, exist_ok=True)
    entry = write_json(part / "shard.json", {"mode": "base" if n % 2 else "delta"})
    checkpoints.commit_pass(root, n, {"offsets": {"0": n * 100}, "records_total": n * 100}, ranks=[0],
                            shard_entries=[{"mode": "base" if n % 2 else "delta", "manifest": entry}])
    n += 1
"""


@pytest.mark.process
def test_a_commit_killed_at_any_moment_leaves_the_previous_pass_complete(tmp_path: Path) -> None:
    root = tmp_path / "ckpt"
    rng = np.random.default_rng(0)
    for _ in range(6):
        child = subprocess.Popen([sys.executable, "-c", _COMMITTER, str(root)], start_new_session=True,
                                 cwd=Path(__file__).resolve().parents[2])
        try:
            deadline = time.monotonic() + 60  # a loaded machine may take longer than the sleep to commit one
            while not checkpoints.complete_passes(root) and child.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(0.6 + rng.random() * 0.6)
        finally:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
        done = checkpoints.complete_passes(root)
        assert done, "no pass committed at all"
        for n in done:  # every pass that has a manifest verifies completely
            man = checkpoints.read_pass(root, n)
            assert man["offsets"] == {"0": n * 100}
        found = newest_usable_pass(root)
        assert found is not None and found[0] == done[-1]
    # the half-written pass the last kill left (if any) is not complete and gets discarded
    checkpoints.discard_incomplete(root)
    assert all((checkpoints.pass_dir(root, n) / checkpoints.MANIFEST).is_file()
               for n in checkpoints.complete_passes(root))


def _commit(root: Path, n: int, mode: str) -> None:
    checkpoints.write_worker_part(root, n, 0, {"opt.t": np.array([n], np.float64)}, {"offsets": {"0": n}})
    part = checkpoints.pass_dir(root, n) / "shard-0"
    part.mkdir(parents=True)
    entry = write_json(part / "shard.json", {"mode": mode})
    checkpoints.commit_pass(root, n, {"offsets": {"0": n}}, ranks=[0], shard_entries=[{"mode": mode,
                                                                                       "manifest": entry}])


def test_a_corrupt_pass_is_refused_by_name_and_the_previous_one_is_used(tmp_path: Path) -> None:
    for n, mode in [(1, "base"), (2, "delta"), (3, "delta")]:
        _commit(tmp_path, n, mode)
    victim = checkpoints.pass_dir(tmp_path, 3) / "worker-0.arrays"
    data = bytearray(victim.read_bytes())
    data[-1] ^= 0xFF
    victim.write_bytes(bytes(data))
    with pytest.raises(CorruptData, match=r"worker-0\.arrays"):
        checkpoints.read_pass(tmp_path, 3)
    found = newest_usable_pass(tmp_path)
    assert found is not None and found[0] == 2
    (checkpoints.pass_dir(tmp_path, 2) / checkpoints.MANIFEST).write_text("{not json")
    with pytest.raises(CorruptData, match=r"pass\.json"):
        checkpoints.read_pass(tmp_path, 2)
    assert newest_usable_pass(tmp_path)[0] == 1


def test_prune_keeps_the_last_passes_and_the_base_their_deltas_need(tmp_path: Path) -> None:
    modes = ["base", "delta", "delta", "base", "delta", "delta", "delta"]
    for n, mode in enumerate(modes, start=1):
        _commit(tmp_path, n, mode)
    (tmp_path / "pass-00000008").mkdir()  # a commit that died: no manifest
    assert checkpoints.discard_incomplete(tmp_path) == [8]
    assert checkpoints.prune(tmp_path, keep=2) == [1, 2, 3]  # 6 and 7 need the base of pass 4
    assert checkpoints.complete_passes(tmp_path) == [4, 5, 6, 7]
    assert [Path(t).parent.name for t in checkpoints.chain(tmp_path, 6)] == ["pass-00000004", "pass-00000005",
                                                                             "pass-00000006"]


# A chief: pass 1 committed whole; pass 2 released (the shards' consistent point taken), then
# it finishes the commit only when told, the way StreamingJob does it (trainer.pass_commit).
_CHIEF = r"""
import sys
import numpy as np
from pathlib import Path
from ps.admin import SaveMode
from ps.client import PSClient
from trainer import checkpoints
from trainer.metrics import Metrics
from trainer.pass_commit import CommitFinisher, finish_pass
root, endpoints = Path(sys.argv[1]), sys.argv[2].split(",")
keys = np.arange(1, 20001, dtype=np.uint64)
client = PSClient(endpoints)
finisher = CommitFinisher(PSClient(endpoints))
for n in (1, 2):
    client.wait(client.push("emb", keys, np.ones((keys.shape[0], 8), np.float32)))
    part = {f"metrics.{k}": v for k, v in Metrics().to_arrays().items()}
    checkpoints.write_worker_part(root, n, 0, part, {"rank": 0, "offsets": {"0": n}, "records": 1})
    saves = client.admin.save(into=checkpoints.shard_template(root, n),
                              mode=SaveMode.BASE if n == 1 else SaveMode.DELTA, detach=True)
    print("released", n, flush=True)
    if n == 2:
        sys.stdin.readline()
    finisher.start(lambda c: finish_pass(c, root, n, saves, [0], keep=3, fields={}))
    if n == 1:
        finisher.wait()
finisher.wait()
print("committed", flush=True)
"""


@pytest.mark.process
def test_a_chief_killed_after_the_release_leaves_the_previous_pass_the_newest(tmp_path: Path) -> None:
    from ps.client import PSClient
    from tests.ps.ps_harness import shard_processes
    from trainer.recovery import restore

    root = tmp_path / "ckpt"
    emb = {"name": "emb", "dim": 8, "optimizer": {"kind": "sgd", "lr": 1.0}, "initializer": {"kind": "zeros"}}
    with shard_processes(tmp_path, [emb]) as shards:
        chief = subprocess.Popen([sys.executable, "-c", _CHIEF, str(root), ",".join(shards.endpoints)],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, start_new_session=True,
                                 cwd=Path(__file__).resolve().parents[2])
        stopped = shards.procs[1]
        assert stopped is not None
        try:
            assert chief.stdout.readline().split() == ["released", "1"]
            assert chief.stdout.readline().split() == ["released", "2"]
            # Shard 1 stopped: its save of pass 2 cannot be reported written, so whatever the chief's
            # finisher does from now on, it cannot write pass 2's manifest.
            os.killpg(stopped.pid, signal.SIGSTOP)
            chief.stdin.write("go\n")
            chief.stdin.flush()
            time.sleep(0.5)  # let the finisher run as far as it can (not needed for correctness)
            os.killpg(chief.pid, signal.SIGKILL)
            chief.wait()
        finally:
            os.killpg(stopped.pid, signal.SIGCONT)
            if chief.poll() is None:
                os.killpg(chief.pid, signal.SIGKILL)
                chief.wait()
        assert checkpoints.complete_passes(root) == [1]
        assert checkpoints.pass_dir(root, 2).is_dir()  # released and written in part, never committed
        found = newest_usable_pass(root)
        assert found is not None and found[0] == 1
        # a restarted chief lets the orphaned save end, drops pass 2 and loads pass 1
        with PSClient(shards.endpoints) as c:
            restored = restore(root, c, rank=0, chief=True)
            assert restored.pass_id == 1 and restored.offsets == {0: 1}
            assert not checkpoints.pass_dir(root, 2).exists()
            np.testing.assert_array_equal(c.wait(c.pull("emb", np.arange(1, 20001, dtype=np.uint64))), -1.0)


@pytest.mark.process
def test_a_pass_with_a_corrupt_table_file_is_quarantined_and_recovery_falls_back(tmp_path: Path) -> None:
    """A flipped byte in a table file of the newest pass made restore fail (and
    left a shard half-loaded). Now the chief's load fails whole, the pass is quarantined, and the
    previous pass (its own chain) is restored, by the chief and then by every other worker."""
    from ps.admin import SaveMode
    from ps.client import PSClient
    from tests.ps.ps_harness import shard_processes
    from trainer.metrics import Metrics
    from trainer.pass_commit import CommitFinisher, finish_pass
    from trainer.recovery import restore

    root = tmp_path / "ckpt"
    tables = [{"name": t, "dim": 4, "optimizer": {"kind": "sgd", "lr": 1.0}, "initializer": {"kind": "zeros"}}
              for t in ("emb", "other")]
    keys = np.arange(1, 5001, dtype=np.uint64)
    with shard_processes(tmp_path, tables) as shards, PSClient(shards.endpoints) as c:
        finisher = CommitFinisher(PSClient(shards.endpoints))
        for n, mode in ((1, SaveMode.BASE), (2, SaveMode.DELTA), (3, SaveMode.BASE)):
            for t in ("emb", "other"):
                c.wait(c.push(t, keys, np.ones((keys.shape[0], 4), np.float32)))
            part = {f"metrics.{k}": v for k, v in Metrics().to_arrays().items()}
            checkpoints.write_worker_part(root, n, 0, part, {"rank": 0, "offsets": {"0": 10 * n}, "records": 1})
            saves = c.admin.save(into=checkpoints.shard_template(root, n), mode=mode, detach=True)
            finisher.start(lambda client, n=n, saves=saves: finish_pass(client, root, n, saves, [0], keep=5,
                                                                      fields={}))
            finisher.wait()
        finisher.close()
        assert checkpoints.complete_passes(root) == [1, 2, 3]
        victim = sorted((checkpoints.pass_dir(root, 3)).rglob("other*.rows"))[0]
        data = bytearray(victim.read_bytes())
        data[len(data) // 2] ^= 0xFF
        victim.write_bytes(bytes(data))
        assert newest_usable_pass(root)[0] == 3  # its manifest still verifies: only the load finds it

        restored = restore(root, c, rank=0, chief=True)
        assert restored.pass_id == 2 and restored.offsets == {0: 20}
        assert checkpoints.complete_passes(root) == [1, 2]  # pass 3 quarantined, kept to look at
        assert (checkpoints.pass_dir(root, 3) / checkpoints.QUARANTINED).is_file()
        for t in ("emb", "other"):  # both tables at pass 2, none half at pass 3
            np.testing.assert_array_equal(c.wait(c.pull(t, keys)), -2.0)
        assert restore(root, c, rank=1, chief=False).pass_id == 2  # every worker restores the same pass
        checkpoints.discard_incomplete(root)  # a quarantined pass is not a half-committed one
        assert checkpoints.pass_dir(root, 3).is_dir()
