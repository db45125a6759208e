"""Load a shard's table kernels before it serves.

numba compiles (or loads from its on-disk cache) a kernel for each signature on its first
call in a process, and the arrays a shard decodes from the wire are read-only views, a
signature of their own. Left to the first requests, that cost 0.4-1.5 s of CPU inside the
first pull and push a shard answered (a worker's first step stalled on it, and it was billed
to training). :func:`warm_kernels` runs one small pull and push of each table's config
through the real request path (wire-encoded, decoded, answered) on scratch tables, so a
shard that answers its health check is warm.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np

from core.errors import StreamrecError
from core.kernel_cache import load_runtime
from ps import protocol
from ps.protocol import Flag, Message, Op
from ps.shard_tables import ShardTables
from tables.table_config import TableConfig

# one inline request (keys and gradients inside the header frame) and one whose arrays travel
# as frames of their own: the decoded arrays of the two have different numba signatures
log = logging.getLogger(__name__)
_SIZES = (8, 2 * protocol.INLINE_MAX_BYTES // 8)


def _wire(msg: Message) -> Message:
    """``msg`` as a shard decodes it: encoded, each frame read back as immutable bytes."""
    return protocol.decode([bytes(f) for f in protocol.encode(msg)])


def warm_kernels(configs: Sequence[TableConfig]) -> None:
    """Pull and push each config's rows once on a throwaway copy of the table. A warm-up that
    fails is logged, never raised: the shard then serves cold."""
    load_runtime()  # numba's registries, without the scipy.linalg a first kernel call imports
    try:
        _warm(configs)
    except StreamrecError as err:
        log.warning("table kernels not warmed up: %s", err.message)


def _warm(configs: Sequence[TableConfig]) -> None:
    scratch_configs = [c.model_copy(update={"initial_capacity": 16}) for c in configs]
    if not scratch_configs:
        return
    scratch = ShardTables(scratch_configs, index=0)
    for cfg in scratch_configs:
        for n in _SIZES:
            keys = np.arange(1, n + 1, dtype=np.uint64)
            pull = _wire(Message(Op.PULL_SPARSE, 1, cfg.name, [keys]))
            scratch.pull_frame(pull, 1)
            scratch.pull(pull)
            grads = np.zeros((n, cfg.width), np.float32)
            counts = np.ones(n, np.float32)
            scratch.push(_wire(Message(Op.PUSH_SPARSE, 2, cfg.name, [keys, grads, counts, counts])))
            scratch.push(_wire(Message(Op.PUSH_SPARSE, 3, cfg.name, [keys, grads])))
            scratch.push(_wire(Message(Op.PUSH_SPARSE, 4, cfg.name, [keys, grads, counts, counts], flags=Flag.UNIQUE)))
