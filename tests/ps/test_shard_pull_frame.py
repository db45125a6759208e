"""A small pull's reply frame, its rows gathered in place, is byte for byte the encoded reply."""

from __future__ import annotations

import numpy as np

from ps import protocol
from ps.protocol import INLINE_MAX_BYTES, Flag, Message, Op
from ps.shard_tables import ShardTables
from tables.table_config import OptimizerConfig, TableConfig

EMB = TableConfig(name="emb", dim=16, optimizer=OptimizerConfig(kind="adagrad", lr=0.05))


def _request(keys: np.ndarray, flags: Flag = Flag.NONE, table: str = "emb") -> Message:
    return protocol.decode(protocol.encode(Message(Op.PULL_SPARSE, 41, table, [keys], flags=flags)))


def test_the_frame_is_the_encoded_reply_of_pull() -> None:
    tables = ShardTables([EMB], index=0)
    keys = np.arange(1, 201, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    tables.sparse["emb"].push(keys[::2], np.ones((100, 16), np.float32))  # half stored, half absent
    request = _request(np.concatenate([keys, keys[:7]]))  # repeats too
    frame = tables.pull_frame(request, 12345)
    reply = tables.pull(request)
    reply.incarnation = 12345
    assert bytes(frame) == protocol.encode(reply)[0]
    got = protocol.decode([bytes(frame)])
    assert (got.request_id, got.incarnation, got.status) == (41, 12345, protocol.STATUS_OK)
    np.testing.assert_array_equal(got.arrays[0], tables.sparse["emb"].pull(request.arrays[0]))
    assert tables.sparse["emb"].counters["pulls"] == 3


def test_what_the_frame_cannot_carry_is_left_to_pull() -> None:
    tables = ShardTables([EMB], index=0)
    too_many = INLINE_MAX_BYTES // (4 * 16) + 1
    assert tables.pull_frame(_request(np.arange(too_many, dtype=np.uint64)), 1) is None
    assert tables.pull_frame(_request(np.arange(3, dtype=np.uint64), Flag.EXISTING), 1) is None
    assert tables.pull_frame(_request(np.arange(3, dtype=np.uint64), table="nope"), 1) is None
    assert tables.pull_frame(_request(np.arange(3, dtype=np.int64)), 1) is None
    assert tables.sparse["emb"].counters["pulls"] == 0


def test_the_reused_buffer_answers_each_pull_with_its_own_id_and_rows() -> None:
    """One buffer per table serves every small pull: each frame, taken before the next pull, is
    that pull's encoded reply (its id, its key count, its rows)."""
    tables = ShardTables([EMB], index=0)
    keys = np.arange(1, 257, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    tables.sparse["emb"].push(keys, np.ones((256, 16), np.float32))
    for rid, n in enumerate((200, 3, 256, 1, 200), start=7):
        request = protocol.decode(protocol.encode(Message(Op.PULL_SPARSE, rid, "emb", [keys[:n][::-1].copy()])))
        frame = bytes(tables.pull_frame(request, 99))
        reply = tables.pull(request)
        reply.incarnation = 99
        assert frame == protocol.encode(reply)[0]
