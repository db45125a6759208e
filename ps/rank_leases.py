"""Worker ranks handed out as leases, so trainers need no stable identity (a Deployment's pods).

PS shard 0 keeps this table (op ``LEASE``, the lease calls of :class:`ps.admin.PSAdmin`). A trainer
started without a rank claims one in ``[0, W)`` under a holder id of its own (pod name and
pid) and renews it well within ``ttl_s``; a clean exit releases it. A holder that dies stops
renewing, its lease expires after ``ttl_s``, and the next claim gets that rank: the
replacement reads the dead worker's partitions and writes its checkpoint part. Whoever holds
rank 0 is the chief.

- A claim by a holder that already has a rank (a resent request, or a renewal that raced an
  expiry nobody used) returns that rank: claims are idempotent per holder.
- Free ranks go lowest first, so rank 0 (the chief) is filled first. No free rank: the
  reply names no rank and says when the earliest lease expires (claimants wait and retry).
- A renewal extends the holder's lease; a rank the table does not know (shard 0 restarted:
  the table lives in memory only) is granted back to the holder that renews it, and a rank
  someone else holds is refused with :class:`Conflict` (the renewer lost it and must stop).
- A fresh table grants no *new* rank during its first ``ttl_s`` (grace; the ttl of the first
  request it sees): after a shard-0 restart the live holders re-claim their own ranks by
  renewing before newcomers take them.
- ``epoch`` changes whenever a rank passes to another holder, whenever the table is new (it
  carries a per-table nonce), and on ``bump`` (a worker saw a shard lose its tables): workers
  compare it to learn that membership changed and meet again from the last committed pass.
- ``meet`` is the workers' rendezvous (trainer.job): a holder arrives at a named step of the
  current epoch and polls until ``workers`` holders arrived. Arrivals are idempotent and a
  complete step stays complete, so a resent or late poll never hangs; steps of an older
  epoch are forgotten, so a dead holder's arrival never counts in a later epoch.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from core.errors import Conflict, InvalidInput

_MEETINGS_KEPT = 64  # steps remembered per epoch (a worker polls only its current one)


@dataclass
class HeldRank:
    """A rank's lease in the shard's table: who holds it, and until when."""

    holder: str
    expires: float  # on the table's clock


class RankLeases:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._created = clock()
        self._grace_end: float | None = None  # fixed by the first claim or renewal
        self._nonce = os.urandom(4).hex()
        self._changes = 0
        self.workers: int | None = None
        self.leases: dict[int, HeldRank] = {}
        self._meetings: dict[str, set[str]] = {}  # step -> holders arrived

    @property
    def epoch(self) -> str:
        return f"{self._nonce}.{self._changes}"

    # ------------------------------------------------------------------ verbs
    def claim(self, holder: str, workers: int, ttl_s: float) -> dict[str, Any]:
        """``{"rank": r, "epoch"}``, or ``{"rank": None, "retry_s"}`` when every rank is leased."""
        now = self._clock()
        self._check_workers(workers, now)
        own = self._rank_of(holder)
        if own is not None:
            self.leases[own].expires = now + ttl_s
            return {"rank": own, "epoch": self.epoch}
        grace = self._grace(ttl_s) - now
        if grace > 0:
            return {"rank": None, "retry_s": grace, "epoch": self.epoch}
        free = [r for r in range(workers) if r not in self.leases or self.leases[r].expires <= now]
        if not free:
            return {"rank": None, "retry_s": min(lease.expires for lease in self.leases.values()) - now,
                    "epoch": self.epoch}
        rank = free[0]
        self.leases[rank] = HeldRank(holder, now + ttl_s)
        self._changes += 1
        self._meetings.clear()
        return {"rank": rank, "epoch": self.epoch}

    def renew(self, holder: str, rank: int, workers: int, ttl_s: float) -> dict[str, Any]:
        now = self._clock()
        self._check_workers(workers, now)
        self._grace(ttl_s)
        if not 0 <= rank < workers:
            raise InvalidInput(f"rank {rank} is not in [0, {workers})")
        lease = self.leases.get(rank)
        if lease is not None and lease.holder != holder:
            raise Conflict(f"rank {rank} is leased to {lease.holder!r}, not {holder!r}",
                           detail={"rank": rank, "holder": lease.holder})
        if lease is None:  # the table forgot it (a restarted shard 0): the renewer keeps its rank
            self.leases[rank] = HeldRank(holder, now + ttl_s)
        else:
            lease.expires = now + ttl_s
        return {"rank": rank, "epoch": self.epoch}

    def release(self, holder: str, rank: int) -> dict[str, Any]:
        lease = self.leases.get(rank)
        if lease is not None and lease.holder == holder:
            del self.leases[rank]  # membership is unchanged until someone else takes the rank
        return {"rank": rank, "epoch": self.epoch}

    def meet(self, holder: str, step: str, workers: int) -> dict[str, Any]:
        """Arrive at ``step`` (``"<epoch>/<name>"``); complete once ``workers`` holders arrived.
        A step of another epoch is never complete: the caller learns the epoch moved."""
        epoch = self.epoch
        if not step.startswith(f"{epoch}/"):
            return {"complete": False, "epoch": epoch}
        arrived = self._meetings.setdefault(step, set())
        arrived.add(holder)
        while len(self._meetings) > _MEETINGS_KEPT:
            del self._meetings[next(iter(self._meetings))]
        return {"complete": len(arrived) >= workers, "epoch": epoch}

    def bump(self, seen: str) -> dict[str, Any]:
        """A new epoch, unless it already moved past ``seen`` (every worker that saw one failure
        asks; the first one bumps, the others learn the new epoch)."""
        if seen == self.epoch:
            self._changes += 1
            self._meetings.clear()
        return {"epoch": self.epoch}

    def listing(self) -> dict[str, Any]:
        now = self._clock()
        return {"epoch": self.epoch, "workers": self.workers,
                "leases": {str(r): {"holder": lease.holder, "expires_in_s": lease.expires - now}
                           for r, lease in sorted(self.leases.items())}}

    def handle(self, meta: dict[str, Any]) -> dict[str, Any]:
        """The shard op: ``meta`` names an ``action`` and its arguments."""
        action = meta.get("action")
        try:
            if action == "claim":
                return self.claim(str(meta["holder"]), int(meta["workers"]), _ttl(meta))
            if action == "renew":
                return self.renew(str(meta["holder"]), int(meta["rank"]), int(meta["workers"]), _ttl(meta))
            if action == "release":
                return self.release(str(meta["holder"]), int(meta["rank"]))
            if action == "meet":
                return self.meet(str(meta["holder"]), str(meta["step"]), int(meta["workers"]))
            if action == "bump":
                return self.bump(str(meta["epoch"]))
            if action == "list":
                return self.listing()
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidInput(f"lease {action}: bad or missing argument ({exc})") from None
        raise InvalidInput(f"lease action must be claim, renew, release, meet, bump or list, got {action!r}")

    # ---------------------------------------------------------------- helpers
    def _grace(self, ttl_s: float) -> float:
        if self._grace_end is None:
            self._grace_end = self._created + ttl_s
        return self._grace_end
    def _rank_of(self, holder: str) -> int | None:
        return next((r for r, lease in self.leases.items() if lease.holder == holder), None)

    def _check_workers(self, workers: int, now: float) -> None:
        if workers < 1:
            raise InvalidInput(f"workers must be >= 1, got {workers}")
        if self.workers != workers:
            if any(lease.expires > now for lease in self.leases.values()):
                raise Conflict(f"the job has {self.workers} workers; a claim for {workers} is refused",
                               detail={"workers": self.workers})
            self.workers = workers  # nobody holds a live lease: the job may be resized
            self.leases = {r: lease for r, lease in self.leases.items() if r < workers}


def _ttl(meta: dict[str, Any]) -> float:
    ttl = float(meta["ttl_s"])
    if not 0 < ttl <= 3600:
        raise ValueError(f"ttl_s must be in (0, 3600], got {ttl}")
    return ttl
