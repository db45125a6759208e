"""Start from the newest complete pass: shards load its table chain, the worker gets its dense
optimizer state and the Kafka offsets to seek to.

The chief (rank 0) lets any save still running on the shards end (a chief killed after
releasing the workers leaves one), deletes half-written passes and asks the shards to load; every worker
then (after a barrier, so nobody pulls half-loaded tables) reads the same manifest.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from core.errors import CorruptData, NotFound
from ps.client import PSClient
from stores.store import Store, open_store
from trainer import checkpoints


@dataclass
class Restored:
    pass_id: int = 0  # 0: nothing committed yet
    manifest: dict[str, Any] = field(default_factory=dict)
    offsets: dict[int, int] = field(default_factory=dict)
    worker_arrays: dict[str, np.ndarray] = field(default_factory=dict)
    records_total: int = 0


def newest_usable_pass(root: Store) -> tuple[int, dict[str, Any]] | None:
    """The newest complete pass whose files verify; a corrupt one is skipped (older ones remain)."""
    for n in reversed(checkpoints.complete_passes(root)):
        try:
            return n, checkpoints.read_pass(root, n)
        except (CorruptData, NotFound):
            continue
    return None


def load_into_shards(client: PSClient, root: Store, pass_id: int) -> None:
    client.admin.load(chain=checkpoints.chain(root, pass_id))


def restore(root: Store | str, client: PSClient, *, rank: int, chief: bool) -> Restored:
    """Chief: clean up and load the shards (call before the restore barrier). Others: read only."""
    root = open_store(root)
    if chief:
        client.admin.save_wait()  # a save a killed chief left running ends before its half-committed pass goes
        checkpoints.discard_incomplete(root)
    found = newest_usable_pass(root)
    if found is None:
        return Restored()
    n, man = found
    if chief:
        load_into_shards(client, root, n)
    arrays: dict[str, np.ndarray] = {}
    # a worker that did not exist then starts its optimizer fresh
    with contextlib.suppress(CorruptData, NotFound, FileNotFoundError):
        _, arrays = checkpoints.read_worker_part(root, n, rank)
    return Restored(pass_id=n, manifest=man, offsets={int(p): int(o) for p, o in man.get("offsets", {}).items()},
                    worker_arrays=arrays, records_total=int(man.get("records_total", 0)))
