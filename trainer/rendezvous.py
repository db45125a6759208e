"""Where the workers of a job meet: the pass barriers and, with leased ranks, the rendezvous of an epoch.

Fixed ranks meet at PS barriers numbered ``BARRIER_TAG + tag``. Leased ranks
(``STREAMREC_RANK=auto``, :mod:`trainer.rank_claim`) meet at rendezvous on shard 0 named after
the membership epoch, so a dead worker's arrival never counts later: when the epoch moves (a
replacement took a dead worker's rank, or a shard lost its tables) a meeting raises EpochMoved
and every worker regroups (:mod:`trainer.recovery`).
"""

from __future__ import annotations

import threading

from ps.client import PSClient
from trainer.rank_claim import RankLease

BARRIER_TAG = 1 << 41  # barrier ids of pass commits and restores: far above any step number


class Rendezvous:
    """The job's meeting points; ``epoch`` is the membership epoch this worker trains in ("": fixed ranks)."""

    def __init__(self, client: PSClient, lease: RankLease | None, *, stopping: threading.Event) -> None:
        self.client = client
        self.lease = lease
        self.stopping = stopping
        self.epoch = lease.epoch if lease is not None else ""

    def barrier(self, tag: int, workers: int) -> None:
        """The pass barrier ``tag`` of ``workers`` workers (leased ranks: a rendezvous of this epoch)."""
        if self.lease is not None:
            self.meet(f"pass-{tag}", workers)
            return
        self.client.barrier(BARRIER_TAG + tag, workers, timeout_s=600.0)

    def meet(self, name: str, workers: int) -> None:
        """Leased ranks: the rendezvous ``name`` of this epoch on shard 0 (raises EpochMoved)."""
        assert self.lease is not None
        self.lease.meet(name, workers, epoch=self.epoch, stopping=self.stopping)

    def join_epoch(self) -> None:
        """Train from now on in the epoch the lease last saw."""
        assert self.lease is not None
        self.epoch = self.lease.epoch

    def epoch_moved(self) -> bool:
        """Leased ranks: another epoch started since this worker joined one (a lost rank raises Conflict)."""
        if self.lease is None:
            return False
        self.lease.check()  # a lost rank ends this process (Conflict)
        return self.lease.epoch != self.epoch

    def new_lease_table(self) -> bool:
        """Shard 0 restarted: its lease table is new (the table's nonce leads the epoch)."""
        assert self.lease is not None
        return self.lease.epoch.split(".")[0] != self.epoch.split(".")[0]

    def bump_epoch(self) -> None:
        """Start a new epoch (a shard lost its tables), unless another worker already did."""
        assert self.lease is not None
        self.lease.bump(self.epoch)
