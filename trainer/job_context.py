"""What one worker's job shares with its PassCommitter and its Recovery: one context per worker process."""

from __future__ import annotations

from dataclasses import dataclass

from ps.client import PSClient
from ps.cluster import ClusterSpec
from stores.store import Store
from trainer.job_config import JobConfig
from trainer.params import PSStore
from trainer.passes import PassProgress
from trainer.rendezvous import Rendezvous


@dataclass(frozen=True)
class JobContext:
    config: JobConfig
    spec: ClusterSpec
    root: Store  # checkpoint_dir, a path or a URL (stores.store)
    client: PSClient  # the training thread's (a client is not thread-safe)
    store: PSStore  # the model's parameters on the PS, through this worker's pushes
    progress: PassProgress
    rendezvous: Rendezvous

    @property
    def rank(self) -> int:
        return self.spec.rank

    @property
    def chief(self) -> bool:
        """Rank 0 commits the passes, restores the shards and exports."""
        return self.spec.rank == 0
