"""What `up` says of its final pass once the trainers stopped: "committed" only for a pass whose
``pass.json`` is there and verifies; a pass without it, or with a damaged one, is reported NOT
committed, with the pass the next start resumes from."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.up_final_pass import FinalPass
from trainer import checkpoints


def report(root: Path, pass_id: int) -> list[str]:
    said: list[str] = []
    final = FinalPass("tcp://127.0.0.1:1", root=str(root), timeout_s=1.0, say=said.append)
    final.pass_id = pass_id  # the pass that ended as the final one
    final.report()
    return said


def commit(root: Path, pass_id: int) -> None:
    checkpoints.commit_pass(root, pass_id, {}, ranks=[], shard_entries=[])


def test_a_pass_with_its_manifest_is_reported_committed(tmp_path: Path) -> None:
    commit(tmp_path, 2)
    assert report(tmp_path, 2) == ["final pass committed: pass 2"]


@pytest.mark.parametrize("manifest", [None, b"{not json", b'{"pass": 4, "files": {}}', b'{"pass": 3, "files": [1]}'])
def test_a_pass_without_a_valid_manifest_is_reported_not_committed(tmp_path: Path, manifest: bytes | None) -> None:
    commit(tmp_path, 2)
    (checkpoints.pass_dir(tmp_path, 3) / "shard-0").mkdir(parents=True)  # a save that was cut short
    if manifest is not None:
        (checkpoints.pass_dir(tmp_path, 3) / checkpoints.MANIFEST).write_bytes(manifest)
    (said,) = report(tmp_path, 3)
    assert said.startswith("final pass NOT committed: pass 3 has no valid pass.json (")
    assert said.endswith("the next start resumes from the last committed pass, 2"), said
    assert not said.startswith("final pass committed")


def test_with_no_pass_committed_the_next_start_begins_anew(tmp_path: Path) -> None:
    (said,) = report(tmp_path, 1)
    assert said.startswith("final pass NOT committed: pass 1")
    assert said.endswith("the next start resumes from the start (no pass is committed)"), said


def test_a_chief_that_stops_answering_cannot_hold_the_stop_past_its_deadline(tmp_path: Path) -> None:
    import json
    import threading

    import zmq

    from core.errors import Conflict

    # A chief that refuses an on-demand pass (several workers), answers one status look, then hangs.
    ctx = zmq.Context.instance()
    rep = ctx.socket(zmq.REP)
    rep.setsockopt(zmq.LINGER, 0)
    port = rep.bind_to_random_port("tcp://127.0.0.1")
    done = threading.Event()

    def chief() -> None:
        answers = [{"ok": False, "error": Conflict("passes end on their clock").to_dict()},
                   {"ok": True, "result": {"pass": 4}}]
        for answer in answers:
            rep.recv()
            rep.send(json.dumps(answer).encode())
        done.wait()  # every later look goes unanswered
        rep.close()

    thread = threading.Thread(target=chief, daemon=True)
    thread.start()
    said: list[str] = []
    final = FinalPass(f"tcp://127.0.0.1:{port}", root=str(tmp_path), timeout_s=2.0, say=said.append)
    try:
        final.commit()
    finally:
        done.set()
        thread.join(timeout=10)
    # the unanswered looks are asked again until the deadline, which ends the wait
    assert final.pass_id is None and said == ["final pass not committed: no pass ended within 2 s (up.stop_timeout_s)"]
