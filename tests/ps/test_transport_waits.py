"""ps.transport waits for replies shard by shard with a blocking recv bounded by each request's
deadline: a reply that arrived is taken even once its deadline passed (no needless resend), a
shard that does not answer is resent to, and replies of several shards arrive whatever order
they come in. Fake ROUTER peers in threads; the transport's clock is a fake, so nothing waits
on wall time."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np
import pytest
import zmq

from core.errors import Unavailable
from launcher.launch import free_ports
from ps import protocol, transport
from ps.protocol import Flag, Message, Op
from ps.ps_config import ClientConfig


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> _Clock:
    fake = _Clock()
    monkeypatch.setattr(transport, "time", fake)
    return fake


@contextmanager
def _peer(answer: Callable[[Message], Message | None]) -> Iterator[tuple[str, list[Message], threading.Event]]:
    """A ROUTER in a thread: every request is recorded, then answered with ``answer(request)``
    (None: no answer); the event is set after each request was handled."""
    (port,) = free_ports(1)
    endpoint = f"tcp://127.0.0.1:{port}"
    ctx = zmq.Context()
    sock = ctx.socket(zmq.ROUTER)
    # as the shard: a resend comes on a fresh socket under the same identity; without handover a
    # ROUTER that has not yet seen the old connection close drops it, and the fake clock, moved
    # only by this peer, would then never reach the deadline (a hang seen under load)
    sock.setsockopt(zmq.ROUTER_HANDOVER, 1)
    sock.bind(endpoint)
    seen: list[Message] = []
    handled = threading.Event()
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            if not sock.poll(20):
                continue
            ident, *frames = sock.recv_multipart()
            msg = protocol.decode(frames)
            seen.append(msg)
            reply = answer(msg)
            if reply is not None:
                reply.incarnation = 7
                sock.send_multipart([ident, *protocol.encode(reply)])
            handled.set()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield endpoint, seen, handled
    finally:
        stop.set()
        thread.join()
        sock.close(linger=0)
        ctx.term()


def _echo_keys(msg: Message) -> Message:
    return Message(msg.op, msg.request_id, msg.table, [msg.arrays[0].astype(np.float32)[:, None]])


def test_a_reply_that_arrived_is_taken_after_its_deadline_without_a_resend(clock: _Clock) -> None:
    with _peer(_echo_keys) as (endpoint, seen, handled):
        t = transport.Transport([endpoint], config=ClientConfig(timeout_s=1.0, retries=2))
        try:
            rid = t.request(0, Op.PULL_SPARSE, "emb", [np.arange(3, dtype=np.uint64)])
            assert handled.wait(10)
            assert t._socks[0].poll(10_000)  # the reply is queued at the client before the wait starts
            clock.now += 5.0  # the deadline is long past when the client gets to wait
            (reply,) = t.collect([rid])
        finally:
            t.close()
    np.testing.assert_array_equal(reply.arrays[0][:, 0], [0, 1, 2])
    assert len(seen) == 1 and not int(seen[0].flags) & int(Flag.RETRY)


def test_replies_of_several_shards_are_matched_whatever_their_order() -> None:
    with _peer(_echo_keys) as (a, _, _), _peer(_echo_keys) as (b, _, _):
        t = transport.Transport([a, b], config=ClientConfig(timeout_s=30.0, retries=0))
        try:
            rids = [t.request(s, Op.PULL_SPARSE, "emb", [np.arange(s, s + 4, dtype=np.uint64)])
                    for s in (1, 0, 1, 0)]
            replies = t.collect(list(reversed(rids)))
        finally:
            t.close()
    starts = [int(r.arrays[0][0, 0]) for r in replies]
    assert starts == [0, 1, 0, 1]
    assert [r.request_id for r in replies] == list(reversed(rids))


def test_a_silent_shard_is_resent_to_then_named(clock: _Clock) -> None:
    def silent(msg: Message) -> None:
        clock.now += 2.0  # each attempt's deadline passes while the peer says nothing
        return None

    with _peer(silent) as (endpoint, seen, _):
        # each real wait is a 51 ms recv; the attempts end on the fake clock, moved by the peer
        t = transport.Transport([endpoint], config=ClientConfig(timeout_s=0.05, retries=1))
        try:
            rid = t.request(0, Op.HEALTH)
            with pytest.raises(Unavailable, match=r"shard 0 .* did not answer after 2 attempts"):
                t.collect([rid])
        finally:
            t.close()
    assert [int(m.flags) & int(Flag.RETRY) for m in seen] == [0, int(Flag.RETRY)]


def test_close_returns_with_a_socket_left_out_of_the_list() -> None:
    """A socket an exception left between its creation and its place in the list (a signal in
    _retry_or_fail's reconnect) must not keep close() waiting in the context's term()."""
    (port,) = free_ports(1)
    t = transport.Transport([f"tcp://127.0.0.1:{port}"], config=ClientConfig(timeout_s=0.1, retries=0))
    orphan = t._ctx.socket(zmq.DEALER)
    orphan.connect(f"tcp://127.0.0.1:{port}")
    closer = threading.Thread(target=t.close, daemon=True)
    closer.start()
    closer.join(timeout=30.0)
    assert not closer.is_alive(), "close() waited on a socket it did not list"
    assert orphan.closed
