"""A trainer's claimed rank (STREAMREC_RANK=auto): claim it on shard 0, keep it renewed, release it.

The lease table is :mod:`ps.rank_leases`. Renewal runs in a thread of its own, every
quarter of the ttl (each try waits up to half a ttl), because the training thread can sit in
a commit rendezvous or a long save for longer than a ttl and must not lose its rank for
that. The thread records the membership epoch each renewal reports and whether the rank was
lost; the training loop reads both (:meth:`check`, :attr:`epoch`) between steps. Losing the
rank to another holder is fatal for this process (the job exits non-zero: its partitions are
someone else's now).

Shard 0 down: renewals fail and are retried; when shard 0 comes back with an empty table
the first renewal takes the rank back (a fresh table gives new claimants nothing during its
first ttl, so live holders win), and the new epoch makes every worker meet again from the
last committed pass. A kill -9 releases nothing: the rank frees itself after the ttl.
"""

from __future__ import annotations

import logging
import threading
import time

from core.errors import Conflict, StreamrecError, Unavailable
from ps.admin import PSAdmin
from ps.client import PSClient
from ps.cluster import ClusterSpec
from ps.ps_config import ClientConfig

log = logging.getLogger("streamrec.rank_lease")

CLAIM_TIMEOUT_S = 3600.0  # a replacement waits this long at most for a dead holder's rank
MEET_TIMEOUT_S = 600.0  # as long as a commit barrier waits for a slow peer


class EpochMoved(Exception):  # a signal inside the trainer (never leaves it), not an error
    """Membership changed while waiting at a rendezvous: the caller regroups."""


class RankLease:
    def __init__(self, spec: ClusterSpec, *, claim_timeout_s: float = CLAIM_TIMEOUT_S) -> None:
        assert spec.rank_lease_ttl_s is not None, "the spec has a fixed rank"
        self.ttl_s = spec.rank_lease_ttl_s
        self.holder = spec.holder()
        self.workers = spec.num_workers
        self._endpoint, self._secret = spec.shard_endpoints[:1], spec.secret()
        self._config = ClientConfig(timeout_s=max(0.2, self.ttl_s / 2), retries=0)
        self._client = PSClient(self._endpoint, config=self._config, secret=self._secret)  # claim, then renewals
        self._loop_client: PSClient | None = None  # the training thread's (clients are per thread)
        self._stop = threading.Event()
        self.lost: str | None = None
        self.rank, self.epoch = self._claim(claim_timeout_s)
        self._thread = threading.Thread(target=self._renew_forever, name="rank-lease", daemon=True)
        self._thread.start()

    def _claim(self, timeout_s: float) -> tuple[int, str]:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                got = self._client.admin.claim_rank(self.holder, workers=self.workers, ttl_s=self.ttl_s)
                if got.rank is not None:
                    log.info("holder %s leased rank %d of %d", self.holder, got.rank, self.workers)
                    return got.rank, got.epoch
                wait = got.retry_s
            except Unavailable:
                wait = self.ttl_s / 3  # shard 0 is not up yet
            if time.monotonic() + wait > deadline:
                raise Unavailable(f"no worker rank of {self.workers} came free within {timeout_s:g}s",
                                  detail={"holder": self.holder})
            time.sleep(min(max(wait, 0.05), self.ttl_s))

    def _renew_forever(self) -> None:
        while not self._stop.wait(self.ttl_s / 4):
            try:
                self.epoch = self._client.admin.renew_rank(self.holder, self.rank, workers=self.workers,
                                                           ttl_s=self.ttl_s).epoch
            except Conflict as err:
                self.lost = err.message
                log.error("holder %s lost rank %d: %s", self.holder, self.rank, err.message)
                return
            except StreamrecError as err:  # shard 0 away: keep trying, its restart gives the rank back
                log.warning("renewing rank %d failed: %s", self.rank, err.message)

    def check(self) -> None:
        """Raise Conflict when the rank went to another holder (this worker must stop)."""
        if self.lost is not None:
            raise Conflict(f"worker rank {self.rank} was lost: {self.lost}", detail={"rank": self.rank})

    def bump(self, seen: str) -> None:
        """Start a new epoch (a shard lost its tables), unless another worker already did."""
        self.epoch = self._loop_admin().bump_epoch(seen)

    def meet(self, name: str, workers: int, *, epoch: str, stopping: threading.Event) -> None:
        """Wait at rendezvous ``name`` of ``epoch`` until ``workers`` holders are there. Raises
        EpochMoved when the epoch moves meanwhile, Conflict when the rank was lost or the job
        is stopping (SIGTERM: the rank is released on the way out); waits out a shard-0 restart."""
        deadline = time.monotonic() + MEET_TIMEOUT_S
        while True:
            self.check()
            if stopping.is_set():
                raise Conflict(f"stopped while waiting for the other workers at {name!r}")
            try:
                meeting = self._loop_admin().meet(self.holder, f"{epoch}/{name}", workers=workers)
                self.epoch = meeting.epoch
                if meeting.complete:
                    return
            except Unavailable:
                pass
            if self.epoch != epoch:
                raise EpochMoved(self.epoch)
            if time.monotonic() > deadline:
                raise Unavailable(f"workers did not all reach {name!r} within {MEET_TIMEOUT_S:g}s")
            time.sleep(0.05)

    def _loop_admin(self) -> PSAdmin:
        """The training thread's lease calls (meet, bump)."""
        if self._loop_client is None:
            self._loop_client = PSClient(self._endpoint, config=self._config, secret=self._secret)
        return self._loop_client.admin

    def close(self) -> None:
        """Stop renewing and release the rank (a clean exit frees it at once)."""
        self._stop.set()
        self._thread.join(timeout=self.ttl_s)
        try:
            if self.lost is None:
                self._client.admin.release_rank(self.holder, self.rank)
                log.info("holder %s released rank %d", self.holder, self.rank)
        except StreamrecError as err:
            log.warning("releasing rank %d failed (it expires in %gs): %s", self.rank, self.ttl_s, err.message)
        finally:
            self._client.close()
            if self._loop_client is not None:
                self._loop_client.close()
