"""The parameter server's control calls, typed: saves and loads, policy, passes, leases, stats.

A :class:`PSAdmin` shares its :class:`ps.transport.Transport` with the
:class:`ps.client.PSClient` that made it (``client.admin``): the same connections, so it
belongs to the same thread. Every call blocks until every shard asked has answered.
Calls that touch every shard return one entry per shard, shard 0 first. Control calls never
raise :class:`core.errors.ShardRestarted`: the data plane (``PSClient.wait``) reports a restart.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from core.errors import InvalidInput
from ps.placement import Placement, default_placement
from ps.protocol import Flag, Op
from ps.transport import Transport


class SaveMode(enum.StrEnum):
    BASE = "base"  # every row
    DELTA = "delta"  # the rows changed since the previous save on the same cursor


@dataclass(frozen=True)
class RankClaim:
    """A claim's or renewal's answer: ``rank`` None when every rank is leased (retry after ``retry_s``)."""

    rank: int | None
    epoch: str
    retry_s: float = 0.0


@dataclass(frozen=True)
class Meeting:
    complete: bool  # ``workers`` holders arrived
    epoch: str


@dataclass(frozen=True)
class Lease:
    holder: str
    expires_in_s: float


@dataclass(frozen=True)
class LeaseTable:
    epoch: str
    workers: int | None
    leases: dict[int, Lease]  # rank -> its lease


@dataclass(frozen=True)
class Replacement:
    """A load that places the virtual shards anew (:meth:`PSAdmin.load`)."""

    saved_shards: int  # how many shards wrote the chain
    placement: Placement  # where the rows go now
    dense_slice_min_elements: int  # the client's: how dense arrays are cut over the new shards


class PSAdmin:
    """Control calls to the shards behind ``transport``."""

    def __init__(self, transport: Transport, placement: Callable[[], Placement] | None = None) -> None:
        """``placement``: the client's routing, recorded in every save (default: the shard count's)."""
        self._transport = transport
        self._placement = placement or (lambda: default_placement(transport.n_shards))

    # ---------------------------------------------------------------- saves
    def save(self, path: str | None = None, *, into: str | None = None, mode: SaveMode = SaveMode.BASE,
             cursor: str = "checkpoint", timeout_s: float = 600.0, detach: bool = False) -> list[dict[str, Any]]:
        """Every shard saves its tables; returns each shard's entry (save id, mode, cursor, dir,
        manifest: the file entry of its ``shard.json``).

        ``into``: a directory template with ``{shard}`` (one save dir per shard, e.g. one pass);
        else numbered saves under ``path``/shard-NNN or the shard's ``--checkpoint-dir``. A
        delta asked of a shard that has no base on ``cursor`` yet comes back as a base.

        ``detach``: return as soon as every shard took the save's consistent point (pushes
        after this return are not in the save), while the shards write on; the entries then
        lack ``manifest`` and :meth:`save_wait` collects the full ones (or the error). A shard
        runs one save at a time: a save asked during a running one is refused with Conflict.
        """
        metas = []
        placement = self._placement().to_meta()
        for s in range(self._transport.n_shards):
            meta: dict[str, Any] = {"mode": SaveMode(mode).value, "cursor": cursor, "placement": placement}
            if into is not None:
                meta["dir"] = into.format(shard=s)
            elif path is not None:
                meta["path"] = str(path)
            metas.append(meta)
        flags = Flag.DETACH if detach else Flag.NONE
        return self._transport.ask_every_shard(Op.SAVE, metas, flags=flags, timeout_s=timeout_s)

    def save_wait(self, saves: list[dict[str, Any]] | None = None, *,
                  timeout_s: float = 600.0) -> list[dict[str, Any]]:
        """The full entries of the detached saves ``saves`` (what ``save(detach=True)``
        returned) once every shard has written its part; a shard's failure is raised here as
        its error class, naming the shard and the cause. Any client may wait (not only the one
        that asked). Without ``saves``: wait until no shard runs a save (whoever started it)."""
        n = self._transport.n_shards
        metas = [{} for _ in range(n)] if saves is None else [{"save": e["save"]} for e in saves]
        if len(metas) != n:
            raise InvalidInput(f"save_wait needs one entry per shard ({n}), got {len(metas)}")
        return self._transport.ask_every_shard(Op.SAVE_WAIT, metas, timeout_s=timeout_s)

    def load(self, path: str | None = None, *, chain: list[str] | None = None, timeout_s: float = 600.0,
             replace: Replacement | None = None) -> None:
        """Every shard restores: from ``chain`` (save-dir templates with ``{shard}``, oldest
        first; the newest base onwards is replayed), else its numbered saves under ``path`` or
        its ``--checkpoint-dir``. ``replace`` (with ``chain``): the chain was written by
        ``replace.saved_shards`` shards under another placement; every shard loads the rows
        ``replace.placement`` puts on it from all of their saves (:mod:`ps.shard_replace`)."""
        metas = []
        for s in range(self._transport.n_shards):
            if chain is not None and replace is not None:
                metas.append({"sources": [[t.format(shard=j) for t in chain] for j in range(replace.saved_shards)],
                              "placement": replace.placement.to_meta(),
                              "dense_slice_min_elements": replace.dense_slice_min_elements})
            elif chain is not None:
                metas.append({"dirs": [t.format(shard=s) for t in chain]})
            else:
                metas.append({"path": str(path)} if path is not None else {})
        self._transport.ask_every_shard(Op.LOAD, metas, timeout_s=timeout_s)

    # ---------------------------------------------------------------- tables
    def shrink(self) -> list[dict[str, Any]]:
        """Every shard evicts by its tables' policies: ``{evicted: {table: rows}}`` per shard."""
        return self._every_shard(Op.SHRINK)

    def end_pass(self) -> list[dict[str, Any]]:
        """Every shard closes a pass of its sparse tables: ``{passes: {table: passes so far}}`` per shard."""
        return self._every_shard(Op.END_PASS)

    def policy(self, table: str) -> list[dict[str, Any]]:
        """Per shard: ``table``'s admission and eviction policy and how many rows its eviction
        would remove now."""
        return self.apply_policy(table)

    def apply_policy(self, table: str, *, admission: dict[str, Any] | None = None,
                     eviction: dict[str, Any] | None = None, dry_run: bool = False) -> list[dict[str, Any]]:
        """Validate new ``admission``/``eviction`` settings on every shard, count what they would
        evict and (unless ``dry_run``) apply them; per shard, as :meth:`policy`."""
        meta = {"table": table, "admission": admission, "eviction": eviction, "dry_run": dry_run}
        return self._every_shard(Op.POLICY, {k: v for k, v in meta.items() if v is not None})

    def stats(self) -> list[dict[str, Any]]:
        return self._every_shard(Op.STATS)

    def health(self) -> list[dict[str, Any]]:
        """``{ok, index, pid}`` per shard; raises Unavailable naming a shard that does not answer."""
        return self._every_shard(Op.HEALTH)

    def stop(self) -> None:
        """Ask every shard to exit."""
        self._every_shard(Op.STOP)

    def _every_shard(self, op: Op, meta: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        return self._transport.ask_every_shard(op, [meta or {}] * self._transport.n_shards)

    # ---------------------------------------------------------------- rank leases (shard 0, see ps.rank_leases)
    def claim_rank(self, holder: str, *, workers: int, ttl_s: float) -> RankClaim:
        """Lease a free rank of ``workers`` to ``holder`` (its own again, if it has one)."""
        got = self._lease("claim", holder=holder, workers=workers, ttl_s=ttl_s)
        return RankClaim(got["rank"], str(got["epoch"]), float(got.get("retry_s", 0.0)))

    def renew_rank(self, holder: str, rank: int, *, workers: int, ttl_s: float) -> RankClaim:
        """Extend ``holder``'s lease of ``rank`` (granted back if the table forgot it); Conflict
        when another holder has it."""
        got = self._lease("renew", holder=holder, rank=rank, workers=workers, ttl_s=ttl_s)
        return RankClaim(int(got["rank"]), str(got["epoch"]))

    def release_rank(self, holder: str, rank: int) -> None:
        self._lease("release", holder=holder, rank=rank)

    def meet(self, holder: str, step: str, *, workers: int) -> Meeting:
        """Arrive at rendezvous ``step`` of the current epoch."""
        got = self._lease("meet", holder=holder, step=step, workers=workers)
        return Meeting(bool(got["complete"]), str(got["epoch"]))

    def bump_epoch(self, seen: str) -> str:
        """A new epoch unless it already moved past ``seen``; the epoch now."""
        return str(self._lease("bump", epoch=seen)["epoch"])

    def leases(self) -> LeaseTable:
        got = self._lease("list")
        leases = {int(r): Lease(str(v["holder"]), float(v["expires_in_s"])) for r, v in got["leases"].items()}
        return LeaseTable(str(got["epoch"]), got["workers"], leases)

    def _lease(self, action: str, *, holder: str = "", workers: int = 0, ttl_s: float = 0.0, rank: int = -1,
               step: str = "", epoch: str = "") -> dict[str, Any]:
        meta = {"action": action, "holder": holder, "workers": workers, "ttl_s": ttl_s, "rank": rank, "step": step,
                "epoch": epoch}
        (reply,) = self._transport.collect([self._transport.request(0, Op.LEASE, meta=meta)], report_restart=False)
        return reply.meta
