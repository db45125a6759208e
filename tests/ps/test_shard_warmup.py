"""A shard loads its table kernels before it serves: requests as the wire delivers them
(read-only arrays, inline or in frames of their own) find every kernel signature ready."""

from __future__ import annotations

import numpy as np

from ps import protocol
from ps.protocol import INLINE_MAX_BYTES, Flag, Message, Op
from ps.shard_tables import ShardTables
from ps.shard_warmup import warm_kernels
from tables import hashmap, optimizers, row_kernels
from tables.table_config import EvictionConfig, OptimizerConfig, TableConfig

WIDE = TableConfig(name="wide", dim=9, wide=True, optimizer=OptimizerConfig(kind="adagrad", lr=0.02))
ADAM = TableConfig(name="adam", dim=4, optimizer=OptimizerConfig(kind="adam", lr=0.01))
KERNELS = (row_kernels.gather, row_kernels.touch, hashmap.lookup, hashmap.insert, optimizers.adagrad, optimizers.adam)


def _wire(msg: Message) -> Message:
    return protocol.decode([bytes(f) for f in protocol.encode(msg)])


def test_requests_after_the_warm_up_compile_nothing() -> None:
    warm_kernels([WIDE, ADAM])
    compiled = [len(k.signatures) for k in KERNELS]
    tables = ShardTables([WIDE, ADAM], index=0)
    for n in (5, INLINE_MAX_BYTES // 8 + 100):
        keys = np.arange(7, 7 + n, dtype=np.uint64)
        for cfg in (WIDE, ADAM):
            pull = _wire(Message(Op.PULL_SPARSE, 1, cfg.name, [keys]))
            tables.pull_frame(pull, 1)
            tables.pull(pull)
            counts = np.ones(n, np.float32)
            for flags in (Flag.NONE, Flag.UNIQUE):
                tables.push(_wire(Message(Op.PUSH_SPARSE, 2, cfg.name, [keys, np.ones((n, cfg.width), np.float32),
                                                                        counts, counts], flags=flags)))
    assert [len(k.signatures) for k in KERNELS] == compiled
    assert tables.sparse["wide"].size() == INLINE_MAX_BYTES // 8 + 100  # the real tables hold their own rows only


def test_a_table_whose_budget_refuses_rows_still_warms_up() -> None:
    tiny = WIDE.model_copy(update={"eviction": EvictionConfig(max_rows=0, over_budget="refuse")})
    warm_kernels([tiny])  # nothing raised: at worst the shard serves cold
