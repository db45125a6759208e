"""Control operations posted from another thread run on the training thread, in order, and
their results and errors come back to the caller."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from core.errors import Conflict
from trainer.job_config import PassConfig
from trainer.loop_calls import LoopCalls, LoopOp
from trainer.passes import PassProgress


def _handlers(ran: list[str]) -> dict[LoopOp, Callable[..., Any]]:
    def shrink() -> dict[str, int]:
        ran.append("shrink")
        return {"evicted": 3}

    def export() -> dict[str, int]:
        raise Conflict("this worker does not export")

    def rollback(pass_id: int) -> dict[str, int]:
        ran.append(f"rollback {pass_id}")
        return {"pass": pass_id}

    return {LoopOp.CHECKPOINT: lambda: {}, LoopOp.EXPORT: export, LoopOp.SHRINK: shrink, LoopOp.ROLLBACK: rollback}


def _serve_until(calls: LoopCalls, done: threading.Event) -> None:
    while not done.is_set():
        calls.serve()
        done.wait(0.01)


def test_an_op_runs_on_the_serving_thread_and_its_result_or_error_comes_back() -> None:
    ran: list[str] = []
    calls = LoopCalls(_handlers(ran))
    done = threading.Event()
    loop = threading.Thread(target=_serve_until, args=(calls, done))
    loop.start()
    try:
        assert calls.call(LoopOp.SHRINK) == {"evicted": 3}
        assert calls.call(LoopOp.ROLLBACK, pass_id=4) == {"pass": 4}
        with pytest.raises(Conflict):
            calls.call(LoopOp.EXPORT)
    finally:
        done.set()
        loop.join()
    assert ran == ["shrink", "rollback 4"]


def test_every_op_needs_a_handler() -> None:
    handlers = _handlers([])
    del handlers[LoopOp.SHRINK]
    with pytest.raises(ValueError, match="shrink"):
        LoopCalls(handlers)


def test_progress_at_a_pass_starts_the_next_one() -> None:
    progress = PassProgress(PassConfig(records=100), workers=2)
    assert (progress.pass_id, progress.clock.pass_id, progress.active) == (0, 0, [0, 1])
    progress.clock.add(60)
    assert progress.clock.due()
    progress.at_pass(3)
    assert (progress.pass_id, progress.clock.pass_id, progress.clock.count) == (3, 4, 0)
