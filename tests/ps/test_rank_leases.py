"""Worker-rank leases (ps.rank_leases): claims, renewals, expiry, re-claims, the rendezvous,
and the same verbs through a real shard process (PSAdmin)."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.errors import Conflict, InvalidInput
from ps.rank_leases import RankLeases

from .ps_harness import shard_processes

TTL = 10.0


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


def _table(clock: Clock) -> RankLeases:
    table = RankLeases(clock)
    clock.now += TTL  # past the grace of a fresh table
    return table


def test_claims_get_distinct_ranks_lowest_first_and_none_when_all_are_leased(clock: Clock) -> None:
    t = _table(clock)
    assert [t.claim(h, 3, TTL)["rank"] for h in ("a", "b", "c")] == [0, 1, 2]
    full = t.claim("d", 3, TTL)
    assert full["rank"] is None and full["retry_s"] == pytest.approx(TTL)
    assert t.listing()["leases"]["1"]["holder"] == "b"


def test_a_holder_reclaiming_gets_its_own_rank_and_membership_is_unchanged(clock: Clock) -> None:
    t = _table(clock)
    first = t.claim("a", 2, TTL)
    t.claim("b", 2, TTL)
    again = t.claim("a", 2, TTL)
    assert again["rank"] == first["rank"] == 0
    assert again["epoch"] != first["epoch"]  # b joined in between
    assert t.claim("a", 2, TTL)["epoch"] == again["epoch"]


def test_an_expired_lease_goes_to_the_next_claimant_and_its_old_holder_cannot_renew(clock: Clock) -> None:
    t = _table(clock)
    t.claim("a", 2, TTL)
    t.claim("b", 2, TTL)
    before = t.epoch
    clock.now += TTL / 2
    t.renew("a", 0, 2, TTL)  # a renews, b does not (it died)
    clock.now += TTL / 2 + 0.1
    assert t.claim("c", 2, TTL)["rank"] == 1
    assert t.epoch != before
    with pytest.raises(Conflict):
        t.renew("b", 1, 2, TTL)
    assert t.renew("a", 0, 2, TTL)["rank"] == 0


def test_renewal_keeps_a_lease_alive_past_its_first_ttl(clock: Clock) -> None:
    t = _table(clock)
    t.claim("a", 1, TTL)
    for _ in range(5):
        clock.now += TTL * 0.6
        t.renew("a", 0, 1, TTL)
    assert t.claim("b", 1, TTL)["rank"] is None


def test_an_expired_lease_nobody_took_is_renewed_by_its_holder(clock: Clock) -> None:
    t = _table(clock)
    t.claim("a", 2, TTL)
    clock.now += 3 * TTL
    assert t.renew("a", 0, 2, TTL)["rank"] == 0
    assert t.claim("b", 2, TTL)["rank"] == 1


def test_release_frees_the_rank_at_once_and_only_for_its_holder(clock: Clock) -> None:
    t = _table(clock)
    t.claim("a", 1, TTL)
    t.release("intruder", 0)
    assert t.claim("b", 1, TTL)["rank"] is None
    t.release("a", 0)
    assert t.claim("b", 1, TTL)["rank"] == 0


def test_a_fresh_table_lets_holders_take_back_their_ranks_before_newcomers(clock: Clock) -> None:
    t = RankLeases(clock)  # shard 0 just restarted: it remembers nobody
    wait = t.claim("newcomer", 2, TTL)
    assert wait["rank"] is None and wait["retry_s"] == pytest.approx(TTL)
    assert t.renew("old-1", 1, 2, TTL)["rank"] == 1  # a live holder re-claims its own rank by renewing
    clock.now += TTL
    assert t.claim("newcomer", 2, TTL)["rank"] == 0
    with pytest.raises(Conflict):
        t.renew("old-0", 0, 2, TTL)  # too late: the newcomer has it


def test_the_grace_is_fixed_by_the_first_request(clock: Clock) -> None:
    t = RankLeases(clock)
    assert t.claim("a", 1, 1.0)["rank"] is None
    clock.now += 1.0
    assert t.claim("b", 1, 600.0)["rank"] == 0  # a longer ttl later does not stretch the grace


def test_no_rank_is_ever_held_twice(clock: Clock) -> None:
    t = _table(clock)
    holders: dict[int, str] = {}
    for i in range(40):  # holders come and go; some die (stop renewing), some renew
        clock.now += TTL / 3
        got = t.claim(f"h{i}", 4, TTL)["rank"]
        if got is not None:
            holders[got] = f"h{i}"
        live = {r: lease.holder for r, lease in t.leases.items() if lease.expires > clock.now}
        assert len(set(live.values())) == len(live)
        for r, h in list(holders.items()):
            if i % 3 and r % 2:
                t.renew(h, r, 4, TTL)
    assert sorted(t.leases) == [0, 1, 2, 3]


def test_a_different_worker_count_is_refused_while_leases_are_live(clock: Clock) -> None:
    t = _table(clock)
    t.claim("a", 2, TTL)
    with pytest.raises(Conflict):
        t.claim("b", 3, TTL)
    clock.now += TTL + 1
    assert t.claim("b", 3, TTL)["rank"] == 0  # nobody alive: the job was resized


def test_meet_completes_when_every_holder_arrived_and_stays_complete(clock: Clock) -> None:
    t = _table(clock)
    t.claim("a", 2, TTL)
    t.claim("b", 2, TTL)
    step = f"{t.epoch}/start"
    assert t.meet("a", step, 2)["complete"] is False
    assert t.meet("a", step, 2)["complete"] is False  # arriving twice counts once
    assert t.meet("b", step, 2)["complete"] is True
    assert t.meet("a", step, 2)["complete"] is True  # a late poll still sees it complete


def test_a_membership_change_voids_meetings_of_the_old_epoch(clock: Clock) -> None:
    t = _table(clock)
    t.claim("a", 2, TTL)
    t.claim("b", 2, TTL)
    old = f"{t.epoch}/commit-4"
    t.meet("b", old, 2)  # b arrives, then dies
    clock.now += TTL + 1
    t.renew("a", 0, 2, TTL)
    t.claim("c", 2, TTL)
    stale = t.meet("a", old, 2)
    assert stale["complete"] is False and stale["epoch"] == t.epoch
    new = f"{t.epoch}/commit-4"
    assert not t.meet("a", new, 2)["complete"] and t.meet("c", new, 2)["complete"]


def test_bump_moves_the_epoch_once_per_seen_epoch(clock: Clock) -> None:
    t = _table(clock)
    seen = t.epoch
    after = t.bump(seen)["epoch"]
    assert after != seen and t.bump(seen)["epoch"] == after


def test_bad_requests_are_invalid_input(clock: Clock) -> None:
    t = _table(clock)
    for meta in ({"action": "claim", "holder": "a", "workers": 2, "ttl_s": 0},
                 {"action": "claim", "holder": "a"}, {"action": "steal"},
                 {"action": "renew", "holder": "a", "rank": 5, "workers": 2, "ttl_s": 1}):
        with pytest.raises(InvalidInput):
            t.handle(meta)


@pytest.mark.process
def test_leases_through_a_real_shard(tmp_path: Path) -> None:
    with shard_processes(tmp_path, [{"name": "emb", "dim": 2}], n=2) as shards, shards.client() as c:
        first = c.admin.claim_rank("a", workers=2, ttl_s=600)
        assert first.rank is None and first.retry_s > 0  # the fresh shard's grace
        renewed = c.admin.renew_rank("a", 1, workers=2, ttl_s=600)
        assert renewed.rank == 1
        with pytest.raises(Conflict):
            c.admin.renew_rank("b", 1, workers=2, ttl_s=600)
        listing = c.admin.leases()
        assert listing.leases[1].holder == "a" and listing.workers == 2
        step = f"{listing.epoch}/x"
        assert c.admin.meet("a", step, workers=1).complete is True
