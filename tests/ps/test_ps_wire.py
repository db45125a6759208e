"""The wire protocol, request signing and routing: pure functions, no network."""

from __future__ import annotations

import contextlib
import hmac

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.errors import Forbidden, InvalidInput, NotFound, Unauthorized, Unavailable
from ps import protocol
from ps.auth import Verifier, is_loopback, sign
from ps.protocol import Flag, Message, Op
from ps.routing import place_dense, plan_keys, shard_of

SECRET = b"0123456789abcdef0123456789abcdef"


def test_round_trip_keeps_arrays_meta_and_ids() -> None:
    keys = np.array([3, 1, 2**64 - 1], np.uint64)
    grads = np.arange(12, dtype=np.float32).reshape(3, 4)
    msg = Message(Op.PUSH_SPARSE, 2**63 + 5, "emb.v2", [keys, grads], {"step": 4}, Flag.SYNC)
    frames = [bytes(f) for f in protocol.encode(msg)]
    assert len(frames) == 1  # small arrays and the meta travel inside the header frame
    got = protocol.decode(frames)
    assert (got.op, got.request_id, got.table, got.meta, got.flags) == (msg.op, msg.request_id, "emb.v2", {"step": 4},
                                                                         Flag.SYNC)
    np.testing.assert_array_equal(got.arrays[0], keys)
    np.testing.assert_array_equal(got.arrays[1], grads)
    assert got.arrays[1].dtype == np.float32
    big = np.arange(protocol.INLINE_MAX_BYTES, dtype=np.float32)  # 4x the inline limit: its own frame
    frames = [bytes(f) for f in protocol.encode(Message(Op.PUSH_DENSE, 1, "w", [big, keys]))]
    assert len(frames) == 2
    got = protocol.decode(frames)
    np.testing.assert_array_equal(got.arrays[0], big)
    np.testing.assert_array_equal(got.arrays[1], keys)


def test_a_small_pull_is_one_frame_laid_out_as_documented() -> None:
    keys = np.array([3, 2**64 - 1], np.uint64)
    (frame,) = protocol.encode(Message(Op.PULL_SPARSE, 77, "emb", [keys], flags=Flag.EXISTING), auth=True)
    header = protocol.HEADER.pack(protocol.MAGIC, protocol.VERSION, Op.PULL_SPARSE, Flag.EXISTING | Flag.AUTH, 0, 1, 3,
                                  0, 77, 0)
    descriptor = bytes([1 | 0x80, 1]) + (2).to_bytes(8, "little")  # uint64, inline; 1-d of 2
    assert frame == header + b"emb" + descriptor + keys.tobytes()


def test_a_signed_small_pull_decodes_with_its_tag_and_not_without() -> None:
    keys = np.array([5, 2**63], np.uint64)
    (frame,) = protocol.encode(Message(Op.PULL_SPARSE, 9, "emb", [keys]), auth=True)
    got = protocol.decode([frame, sign(b"s" * 32, [frame], identity=b"c1")])
    assert (got.op, got.request_id, got.table, got.flags) == (Op.PULL_SPARSE, 9, "emb", Flag.AUTH)
    np.testing.assert_array_equal(got.arrays[0], keys)
    with pytest.raises(InvalidInput, match="auth"):
        protocol.decode([frame])  # the flag announces a tag frame that is not there


_ONE_ARRAY = [bytes(protocol.encode(m)[0]) for m in (
    Message(Op.PULL_SPARSE, 7, "emb", [np.arange(5, dtype=np.uint64)]),
    Message(Op.PULL_SPARSE, 8, "emb", [np.ones((3, 4), np.float32)], incarnation=9),
)]


_KNOWN_FLAGS = sum(int(f) for f in Flag)  # every bit a Flag names (UNIQUE, 0x40, came after 0x3F was written here)


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(_ONE_ARRAY), st.lists(st.tuples(st.integers(0, 200), st.integers(0, 255)), max_size=3),
       st.integers(0, 200))
def test_a_one_frame_message_decodes_to_exactly_what_its_bytes_say(frame: bytes, flips: list[tuple[int, int]],
                                                                   cut: int) -> None:
    """The small-message fast path and the general one agree: whatever decodes re-encodes to
    the same bytes (flags compared on the bits the protocol knows)."""
    mutated = bytearray(frame)
    for at, value in flips:
        if at < len(mutated):
            mutated[at] = value
    for data in (bytes(mutated), bytes(mutated[: len(mutated) - cut])):
        try:
            got = protocol.decode([data])
        except InvalidInput:
            continue
        again = protocol.encode(got)
        assert len(again) == 1
        assert again[0][:6] + again[0][8:] == data[:6] + data[8:]
        assert int(got.flags) == int.from_bytes(data[6:8], "little") & _KNOWN_FLAGS


def test_error_reply_carries_code_and_message() -> None:
    frames = protocol.error_reply(Op.PULL_SPARSE, 9, NotFound("no table x"))
    got = protocol.decode(frames)
    assert got.status == protocol.STATUS_ERROR and got.request_id == 9
    assert got.meta["code"] == "not_found" and got.meta["message"] == "no table x"


def test_unsendable_dtype_is_named() -> None:
    with pytest.raises(InvalidInput, match="complex64"):
        protocol.encode(Message(Op.PUSH_DENSE, 1, "w", [np.zeros(2, np.complex64)]))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=80), min_size=1, max_size=5), st.integers(0, 200))
def test_decoding_junk_only_ever_raises_invalid_input(junk: list[bytes], cut: int) -> None:
    big = np.arange(4096, dtype=np.uint64)
    valid = [bytes(f) for f in protocol.encode(Message(Op.PULL_SPARSE, 1, "emb", [big, big[:4]]))]
    for frames in (junk, [valid[0][:cut], *junk], [valid[0], valid[1][:cut]], [valid[0][:-cut or None], valid[1]]):
        with contextlib.suppress(InvalidInput):
            protocol.decode(frames)


class Clock:
    def __init__(self) -> None:
        self.ns = 1_700_000_000 * 10**9

    def __call__(self) -> int:
        return self.ns


SECOND = 10**9
HEALTH = [bytes(f) for f in protocol.encode(Message(Op.HEALTH, 1), auth=True)]


def _signed(ns: int, *, secret: bytes = SECRET, identity: bytes = b"me") -> list[bytes]:
    """The HEALTH request signed at ``ns`` by client ``identity``, auth frame last."""
    return [*HEALTH, sign(secret, HEALTH, identity=identity, now_ns=ns)]


def test_signatures_refuse_missing_wrong_tampered_stale_and_replayed() -> None:
    clock = Clock()
    verifier = Verifier(SECRET, max_skew_s=60, clock=clock)
    signed = _signed(clock.ns)
    verifier.verify(signed, has_tag=True, identity=b"me")
    with pytest.raises(Forbidden, match="replayed"):
        verifier.verify(signed, has_tag=True, identity=b"me")
    with pytest.raises(Unauthorized):
        verifier.verify(HEALTH, has_tag=False, identity=b"me")
    with pytest.raises(Forbidden, match="signature"):
        verifier.verify(_signed(clock.ns, secret=b"x" * 32), has_tag=True, identity=b"me")
    with pytest.raises(Forbidden, match="signature"):
        verifier.verify([HEALTH[0], b"extra", _signed(clock.ns)[-1]], has_tag=True, identity=b"me")
    stale = _signed(clock.ns + 1)
    clock.ns += 120 * SECOND
    with pytest.raises(Forbidden, match=r"\+120.0 s off this shard's clock"):
        verifier.verify(stale, has_tag=True, identity=b"me")


def test_the_identity_is_under_the_mac() -> None:
    clock = Clock()
    verifier = Verifier(SECRET, clock=clock)
    signed = _signed(clock.ns, identity=b"client-a")
    with pytest.raises(Forbidden, match="signature"):  # replayed from another connection
        verifier.verify(signed, has_tag=True, identity=b"client-b")
    verifier.verify(signed, has_tag=True, identity=b"client-a")


@pytest.mark.parametrize("secret", [SECRET, b"k" * 64, b"long" * 40])  # at, and above, SHA-256's block
@pytest.mark.parametrize("sizes", [[900], [40, 70_000], [200_000, 8, 3]])  # one frame, joined, hashed in place
def test_the_tag_is_the_documented_hmac_sha256(secret: bytes, sizes: list[int]) -> None:
    """Peers of any version verify each other's tags: the MAC is HMAC-SHA256 over the documented bytes."""
    rng = np.random.default_rng(len(secret) + sum(sizes))
    frames = [rng.integers(0, 256, n, dtype=np.uint8).tobytes() for n in sizes]
    tag = sign(secret, frames, identity=b"client-a", now_ns=123)
    ts = tag[:8]
    signed = ts + len(b"client-a").to_bytes(8, "little") + b"client-a" + b"".join(
        len(f).to_bytes(8, "little") + f for f in frames)
    assert tag[8:] == hmac.digest(secret, signed, "sha256")


def test_every_tag_of_the_window_is_remembered_however_many_came_after() -> None:
    clock = Clock()
    verifier = Verifier(SECRET, max_skew_s=60, clock=clock)
    first = _signed(clock.ns)
    verifier.verify(first, has_tag=True, identity=b"me")
    for _ in range(70_000):  # more than the old 65,536-tag window, within one second
        clock.ns += 10_000
        verifier.verify(_signed(clock.ns), has_tag=True, identity=b"me")
    clock.ns += 59 * SECOND  # still inside the accepted window
    with pytest.raises(Forbidden, match="replayed"):
        verifier.verify(first, has_tag=True, identity=b"me")
    clock.ns += 2 * SECOND  # the window moved past it: refused for its age, and its bucket dropped
    with pytest.raises(Forbidden, match="off this shard's clock"):
        verifier.verify(first, has_tag=True, identity=b"me")
    verifier.verify(_signed(clock.ns), has_tag=True, identity=b"me")
    assert verifier.remembered == 1


def test_a_full_replay_memory_refuses_instead_of_forgetting() -> None:
    clock = Clock()
    verifier = Verifier(SECRET, max_skew_s=10, capacity=3, clock=clock)
    signed = [_signed(clock.ns + i) for i in range(4)]
    for request in signed[:3]:
        verifier.verify(request, has_tag=True, identity=b"me")
    with pytest.raises(Unavailable, match="replay memory full: 3 requests"):
        verifier.verify(signed[3], has_tag=True, identity=b"me")
    with pytest.raises(Forbidden, match="replayed"):
        verifier.verify(signed[0], has_tag=True, identity=b"me")
    clock.ns += 12 * SECOND  # the three expired: room again
    verifier.verify(_signed(clock.ns), has_tag=True, identity=b"me")


def test_requests_signed_before_the_verifier_started_are_refused_and_marked_for_resigning() -> None:
    clock = Clock()
    verifier = Verifier(SECRET, max_skew_s=60, clock=clock)
    with pytest.raises(Forbidden, match=r"5\.000 s before this shard started") as refused:
        verifier.verify(_signed(clock.ns - 5 * SECOND), has_tag=True, identity=b"me")
    assert refused.value.detail == {"resign": True}


def test_replies_carry_the_incarnation() -> None:
    frames = [bytes(f) for f in protocol.encode(Message(Op.HEALTH, 3, incarnation=0xABC))]
    assert protocol.decode(frames).incarnation == 0xABC
    err = protocol.decode(protocol.error_reply(Op.HEALTH, 3, NotFound("x"), incarnation=7))
    assert err.incarnation == 7 and err.meta["code"] == "not_found"


def test_loopback_detection() -> None:
    assert is_loopback("tcp://127.0.0.1:5000") and is_loopback("ipc:///tmp/x")
    assert not is_loopback("tcp://0.0.0.0:5000") and not is_loopback("tcp://10.0.0.3:5000")


def test_routing_is_pure_and_documented() -> None:
    keys = np.array([0, 1, 2, 12345678901234567890], np.uint64)
    first = shard_of(keys, 7)
    np.testing.assert_array_equal(first, shard_of(keys.copy(), 7))
    # the documented function, written out for one key
    z = (int(keys[3]) ^ 0x2545F4914F6CDD1D) & (2**64 - 1)
    for mult in (0xFF51AFD7ED558CCD, 0xC4CEB9FE1A85EC53):
        z ^= z >> 33
        z = (z * mult) & (2**64 - 1)
    z ^= z >> 33
    assert first[3] == ((z >> 32) % 4096) % 7  # its virtual shard, on shard v % 7 by default


@pytest.mark.parametrize("n_shards", [2, 3, 8])
def test_zipf_keys_balance_within_five_percent(n_shards: int) -> None:
    rng = np.random.default_rng(n_shards)
    ids = np.unique(rng.zipf(1.2, 400_000).astype(np.uint64) * np.uint64(2654435761))  # distinct Zipf ids
    counts = np.bincount(shard_of(ids, n_shards), minlength=n_shards)
    mean = ids.shape[0] / n_shards
    assert np.abs(counts - mean).max() <= 0.05 * mean, counts


def test_plan_dedupes_groups_by_shard_and_restores_input_order() -> None:
    rng = np.random.default_rng(1)
    keys = rng.zipf(1.3, 5000).astype(np.uint64)
    plan = plan_keys(keys, 3)
    assert len(set(plan.keys.tolist())) == plan.keys.shape[0] == len(set(keys.tolist()))
    np.testing.assert_array_equal(plan.keys[plan.inverse], keys)
    for s in range(3):
        assert (shard_of(plan.keys[plan.shard_slice(s)], 3) == s).all()
    grads = rng.integers(-5, 5, (5000, 3)).astype(np.float32)
    want = np.zeros((plan.keys.shape[0], 3), np.float32)
    np.add.at(want, plan.inverse, grads)
    np.testing.assert_array_equal(plan.sum_by_key(grads), want)


def test_dense_small_arrays_stay_whole_large_ones_are_sliced() -> None:
    small = place_dense("mlp.b0", 400, 4)
    assert len(small) == 1 and (small[0].start, small[0].stop) == (0, 400)
    big = place_dense("mlp.w0", 400 * 400, 4, slice_min_elements=1000)
    assert [(s.start, s.stop) for s in big] == [(0, 40000), (40000, 80000), (80000, 120000), (120000, 160000)]
    assert sorted(s.shard for s in big) == [0, 1, 2, 3]
    assert len({s.part for s in big}) == 4
