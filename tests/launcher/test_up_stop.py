"""launcher.up_stop: Ctrl-C raises out of `up`'s start, and only sets the request once `up` watches,
so no exception lands inside a client library the stop then closes; the watch loop wakes at once."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator

import pytest

from launcher.up_stop import StopRequest, StopRequested


@pytest.fixture
def stop() -> Iterator[StopRequest]:
    request = StopRequest()
    previous = signal.signal(signal.SIGINT, request.handle)
    yield request
    signal.signal(signal.SIGINT, previous)


def test_a_signal_while_starting_raises(stop: StopRequest) -> None:
    with pytest.raises(StopRequested, match="SIGINT"):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5.0)  # the handler runs at the next bytecode: never reached
    assert stop.asked


def test_a_signal_while_watching_only_sets_the_request(stop: StopRequest) -> None:
    stop.deferred = True
    os.kill(os.getpid(), signal.SIGINT)
    assert stop.wait(10.0) and stop.signal_name == "SIGINT"  # no exception: the loop sees it on its turn


def test_the_watch_loop_wakes_as_soon_as_the_signal_comes(stop: StopRequest) -> None:
    stop.deferred = True
    timer = threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    woke = stop.wait(60.0)
    timer.join()
    assert woke  # the request, not the timeout


def test_without_a_signal_the_wait_times_out(stop: StopRequest) -> None:
    stop.deferred = True
    assert not stop.wait(0.3) and not stop.asked
