"""Recommend freshness for bench/freshness.py: when does ``/v1/recommend`` answer a user with the
vector its event trained?

A marker user is new: before its event, recommend ranks with the user's untrained vector (its
id's initializer row, or whatever the service serves a user it has no row for). Its answer
also moves whenever the live path swaps changed item vectors into the index, or a bundle swaps
in: comparing the user's answer with its own earlier answer would time index swaps. So every
probe brackets the marker users' requests with requests of a control user no event names,
and a change of the marker's answer counts only where it cannot come from the index:

    the marker's recommend answer at probe b proves its vector changed since probe a when both
    answers carry the same bundle version and some item is in both answers with a different
    score for the marker, while the control's score of that item is identical in the four
    control answers around a and b (so the item's vector did not move: its score is the inner
    product with the user's vector).

Recommend freshness of a marker = the time of the first such probe b after its produce call
returned, minus that time; a is any earlier probe of the same bundle version, the first taken
before the event was produced. When the service answers every user it has no row for alike
(service.cold_start: the items most liked lately, fixed per bundle), the marker's probe before
its event shows it (its answer is the control's), and the rule is exact instead: the first
answer that differs from the control's, the control's being the same just before and after.
Probes are ~0.1 s apart (the resolution). A change hidden by a
bundle swap between a and b is not seen (the marker counts as not served); on the pass-bundle
path every user's row changes only with a bundle, where every vector moves, so its recommend
freshness cannot be told apart this way (it is the bundle's: see that path's row column).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

K = 100  # items per answer: more items, more chances that one kept its vector between two probes


@dataclass(frozen=True)
class Answer:
    """One recommend answer: bundle version and item id -> score."""

    version: int
    scores: dict[int, float]

    @classmethod
    def of(cls, body: dict[str, Any]) -> Answer:
        return cls(int(body["version"]), {int(it["id"]): float(it["score"]) for it in body["items"]})


@dataclass(frozen=True)
class Probe:
    """The marker's answer with the control's answers just before and just after it."""

    before: Answer
    marker: Answer
    after: Answer


def vector_changed(a: Probe, b: Probe) -> bool:
    """True when ``b``'s marker answer can only differ from ``a``'s by the marker's own vector (module
    docstring); False when they agree or the difference may come from the index or a bundle."""
    versions = {p.version for p in (a.before, a.marker, a.after, b.before, b.marker, b.after)}
    if len(versions) != 1:
        return False
    controls = (a.before.scores, a.after.scores, b.before.scores, b.after.scores)
    for item, score in b.marker.scores.items():
        earlier = a.marker.scores.get(item)
        if earlier is None or earlier == score:
            continue
        seen = [c.get(item) for c in controls]
        if seen[0] is not None and all(s == seen[0] for s in seen):
            return True
    return False


def shares_cold_answer(probe: Probe) -> bool:
    """The marker and the control got one answer, unchanged around it: the service answers users
    it has no row for alike (service.cold_start)."""
    return probe.before == probe.marker == probe.after


def left_cold_answer(probe: Probe) -> bool:
    """The control's answer is the same around the marker's, which differs from it in that version."""
    return probe.before == probe.after and probe.marker.version == probe.before.version and probe.marker != probe.before


@dataclass
class MarkerProbes:
    """A marker's probes of the current bundle version, to compare each new one with. When its
    first probe (before its event) shares the control's answer, rowless users are answered alike
    (the cold-start answer): then a probe whose marker answer differs from the control's, steady
    around it, proves the marker has a row (exact, no index question); else :func:`vector_changed`."""

    probes: list[Probe] = field(default_factory=list)
    cold: bool | None = None  # the first probe shared the control's answer

    def changed_with(self, probe: Probe) -> bool:
        """Record ``probe``; True when it proves the marker's vector changed since the first one."""
        if self.cold is None:
            self.cold = shares_cold_answer(probe)
        if self.cold:
            return left_cold_answer(probe)
        self.probes = [p for p in self.probes if p.marker.version == probe.marker.version]
        changed = any(vector_changed(p, probe) for p in self.probes)
        self.probes.append(probe)
        return changed
