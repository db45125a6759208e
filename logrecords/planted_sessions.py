"""A second planted interaction log, with sessions and trends: what the first one lacks.

:func:`logrecords.generator.planted_interactions` draws each event on its own. Here users click in
sessions, and popularity moves:

- **Sessions**: a user's clicks come in bursts of ``session_mean`` clicks on average (geometric),
  ``click_gap_s`` seconds apart, sessions of all users interleaved in time. Within a session the
  next click leans to the last ones: its pick logit adds ``recency`` times the affinity of each
  item to a decayed sum of the session's earlier clicks' factors (weight 1 for the last click,
  ``recency_decay`` for the one before, and so on). A new session starts from nothing.
- **Trends**: each item's log-popularity moves linearly over the stream by a normal amount of
  standard deviation ``trend`` from the stream's start to its end, so the items trending now are
  not the all-time popular ones, and a decayed count beats a plain one.
- Users drift (their factor rotates over the stream) and late users arrive, as in the first log.

The oracle ranks items by the session-free true score at a given time: the user's preference,
the item's popularity then, and the chance of a like. It is the ceiling of a list made without the
clicks of the session it is shown in; a session's own clicks, once seen, can say more.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from logrecords.generator import (
    EVENT_SECONDS,
    INTERACTIONS_EPOCH,
    InteractionSpec,
    PlantedInteractions,
    planted_world,
    sigmoid,
)


@dataclass(frozen=True)
class SessionSpec(InteractionSpec):
    """The shape of a planted session log (:func:`planted_sessions`): the first log's users and items,
    with sessions and trends."""

    trend: float = 1.5  # std of each item's log-popularity change from the stream's start to its end
    session_mean: float = 6.0  # clicks per session, geometric
    click_gap_s: int = 20  # seconds between a session's clicks
    recency: float = 3.0  # weight of the session's decayed earlier clicks in the pick logit
    recency_decay: float = 0.5  # weight of each earlier click relative to the next


_CHUNK = 2048


def planted_sessions(spec: SessionSpec = SessionSpec()) -> PlantedInteractions:
    """A log of ``spec.events`` clicks in time order (the module docstring), with its oracle."""
    rng = np.random.default_rng(spec.seed)
    d = spec.dim
    w = planted_world(spec, rng)
    v, base = w.v, w.bias
    slope = spec.trend * rng.normal(size=spec.items)
    activity = (1.0 + rng.permutation(spec.users)) ** -spec.activity_skew
    activity /= activity.sum()
    late = rng.random(spec.users) < spec.late_users

    # sessions: lengths until the events are drawn, a start each over the stream's span, a user each
    span = float(spec.events * EVENT_SECONDS)
    lengths = rng.geometric(1.0 / spec.session_mean, size=int(2 * spec.events / spec.session_mean) + 16)
    lengths = lengths[: int(np.searchsorted(np.cumsum(lengths), spec.events)) + 1]
    lengths[-1] -= int(lengths.sum()) - spec.events
    n_sessions = lengths.shape[0]
    start = np.sort(rng.random(n_sessions)) * span
    early = np.where(late, 0.0, activity)
    users = np.where(start / span < spec.late_from, rng.choice(spec.users, size=n_sessions, p=early / early.sum()),
                     rng.choice(spec.users, size=n_sessions, p=activity))

    # clicks position by position: every session still going takes its next click at once
    picks = np.full((n_sessions, int(lengths.max())), -1, np.int64)
    state = np.zeros((n_sessions, d))  # decayed sum of the session's clicks so far
    for k in range(int(lengths.max())):
        going = np.flatnonzero(lengths > k)
        for a in range(0, going.shape[0], _CHUNK):
            rows = going[a:a + _CHUNK]
            frac = (start[rows] + k * spec.click_gap_s) / span
            logits = (spec.scale * (w.user_factors(users[rows], frac * spec.drift) @ v.T) + base
                      + np.outer(frac, slope) + spec.recency * (state[rows] @ v.T))
            picks[rows, k] = np.argmax(logits + rng.gumbel(size=logits.shape), axis=1)
        state[going] = spec.recency_decay * state[going] + v[picks[going, k]]

    # events in time order, distinct times (a later one at least a second after the one before)
    session, position = np.nonzero(picks >= 0)
    t = start[session] + position * spec.click_gap_s
    order = np.argsort(t, kind="stable")
    session, position, t = session[order], position[order], t[order]
    seconds = np.floor(t).astype(np.int64)
    steps = np.arange(seconds.shape[0], dtype=np.int64)
    seconds = np.maximum.accumulate(seconds - steps) + steps
    event_users = users[session]
    event_items = picks[session, position]
    frac = seconds / span
    affinity = (w.user_factors(event_users, frac * spec.drift) * v[event_items]).sum(1)
    likes = (rng.random(event_items.shape[0]) < sigmoid(spec.like_scale * affinity + spec.like_bias)).astype(np.int8)

    def oracle(uids: np.ndarray, when: float) -> np.ndarray:
        """The session-free log P(pick i) + log P(like i) of each user at time ``when``."""
        rows = np.asarray(uids, np.int64) - 1
        f = (when - INTERACTIONS_EPOCH) / span
        aff = w.user_factors(rows, np.full(rows.shape[0], f * spec.drift)) @ v.T
        return spec.scale * aff + base + f * slope + np.log(sigmoid(spec.like_scale * aff + spec.like_bias))

    user_ids = np.arange(1, spec.users + 1, dtype=np.int64)
    item_ids = np.arange(1, spec.items + 1, dtype=np.int64)
    user_attrs, item_attrs = w.attributes(spec, rng)
    return PlantedInteractions(user_ids[event_users], item_ids[event_items], likes, INTERACTIONS_EPOCH + seconds,
                               user_attrs, item_attrs, item_ids, v, base + slope, oracle)
