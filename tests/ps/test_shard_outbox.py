"""The shard's outbox (ps.shard_requests.Outbox) on real ZeroMQ sockets: a reply its peer cannot
take now is dropped and counted by reason, never waited for, and replies to other peers go on."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import zmq

from core.errors import InvalidInput
from ps import protocol
from ps.protocol import Message, Op
from ps.shard_requests import Outbox

ENDPOINT = "inproc://outbox-test"


@pytest.fixture()
def router() -> Iterator[tuple[zmq.Context, zmq.Socket]]:
    ctx = zmq.Context()
    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.SNDHWM, 4)  # inproc: a pipe holds the sender's SNDHWM plus the reader's RCVHWM
    sock.setsockopt(zmq.LINGER, 0)
    sock.bind(ENDPOINT)
    yield ctx, sock
    sock.close()
    ctx.term()


def _dealer(ctx: zmq.Context, identity: bytes) -> zmq.Socket:
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.IDENTITY, identity)
    sock.setsockopt(zmq.RCVHWM, 4)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(ENDPOINT)
    return sock


def _accepted(sock: zmq.Socket, identity: bytes) -> None:
    """Wait until the ROUTER knows ``identity`` (its hello request arrived)."""
    assert sock.poll(10_000)
    assert sock.recv_multipart()[0] == identity


def test_a_peer_that_does_not_read_loses_its_replies_counted_and_others_get_theirs(router) -> None:
    ctx, sock = router
    deaf, reader = _dealer(ctx, b"deaf"), _dealer(ctx, b"reader")
    try:
        for peer, name in ((deaf, b"deaf"), (reader, b"reader")):
            peer.send(b"hello")
            _accepted(sock, name)
        outbox = Outbox(sock, incarnation=7)
        for rid in range(100):  # never blocks although the deaf peer takes none of them
            outbox.reply(b"deaf", Message(Op.PULL_SPARSE, rid, "emb"))
        outbox.error(b"deaf", int(Op.PUSH_SPARSE), 100, InvalidInput("junk"))
        held = 0
        while deaf.poll(0):
            assert protocol.decode(deaf.recv_multipart()).incarnation == 7
            held += 1
        assert outbox.dropped == {"peer_not_reading": 101 - held}
        assert 0 < held <= 8  # what the pipe held: every other reply was counted, none lost unseen

        outbox.send_frame(b"reader", protocol.encode(Message(Op.PULL_SPARSE, 5, "emb"))[0])
        assert reader.poll(10_000)
        assert protocol.decode(reader.recv_multipart()).request_id == 5
        assert outbox.dropped == {"peer_not_reading": 101 - held}
    finally:
        deaf.close()
        reader.close()


def test_a_reply_to_a_gone_peer_is_counted(router) -> None:
    _, sock = router
    outbox = Outbox(sock, incarnation=1)
    outbox.reply(b"never-connected", Message(Op.STATS, 1, ""))
    outbox.error(b"never-connected", int(Op.STATS), 2, InvalidInput("bad"))
    assert outbox.dropped == {"peer_gone": 2}
