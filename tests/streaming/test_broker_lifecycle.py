"""The embedded broker answers metadata requests and never outlives its owner, even on failure."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from streaming.broker import EmbeddedBroker, broker_answers

pytestmark = pytest.mark.process

REPO = Path(__file__).resolve().parents[2]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not yet reaped by a dead parent's reaper) counts as gone.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def wait_gone(pid: int, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.05)
    return False


def test_context_manager_stops_the_broker_even_when_the_block_raises() -> None:
    with pytest.raises(RuntimeError), EmbeddedBroker() as broker:
        pid = broker.process.pid
        assert broker_answers(broker.bootstrap)
        raise RuntimeError("test body failed")
    assert wait_gone(pid)
    assert not broker_answers(broker.bootstrap, timeout_s=0.5)


def run_script(body: str, *, sig: int | None = None) -> int:
    """Run ``body`` in a child Python that prints the broker pid first; optionally signal it; return the pid."""
    script = textwrap.dedent(body)
    # SIGINT's default disposition in the child, whatever the runner left (a background job has it ignored)
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, stdout=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert proc.stdout is not None
    pid = int(proc.stdout.readline())
    if sig is not None:
        proc.send_signal(sig)
    proc.wait(timeout=60)
    return pid


START = """
    import sys, time
    from streaming.broker import EmbeddedBroker
    b = EmbeddedBroker().start()
    print(b.process.pid, flush=True)
"""


def test_normal_exit_without_stop_leaves_no_broker() -> None:
    assert wait_gone(run_script(START))


def test_ctrl_c_leaves_no_broker() -> None:
    assert wait_gone(run_script(START + "    time.sleep(60)\n", sig=signal.SIGINT))


def test_killed_parent_leaves_no_broker() -> None:
    assert wait_gone(run_script(START + "    time.sleep(60)\n", sig=signal.SIGKILL))


def test_failing_test_using_the_fixture_leaves_no_broker(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text((Path(__file__).parents[1] / "conftest.py").read_text())
    pid_file = tmp_path / "pid"
    (tmp_path / "test_fails.py").write_text(textwrap.dedent(f"""
        def test_fails(broker):
            open({str(pid_file)!r}, "w").write(str(broker.process.pid))
            assert False, "deliberate failure"
    """))
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 1, result.stdout + result.stderr  # the test failed...
    assert "deliberate failure" in result.stdout
    assert wait_gone(int(pid_file.read_text()))  # ...and its broker is gone


def test_taken_port_is_a_clear_error_and_leaves_nothing_behind() -> None:
    import socket

    from core.errors import Unavailable

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        broker = EmbeddedBroker(port=taken.getsockname()[1], startup_timeout_s=10)
        with pytest.raises(Unavailable, match="tansu broker"):
            broker.start()
    assert broker.process is None or not alive(broker.process.pid)
