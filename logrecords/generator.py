"""Synthetic click data from a planted ground-truth model, so the best achievable AUC is known.

Every record has 13 dense count fields and 26 categorical slots (the Criteo layout; slot 0
is the user, slot 1 the item). Ids per slot are Zipf distributed. The true click logit is

    bias + sum_s w_s[id_s] + sum_d beta_d * z_d + gamma * <u[user], v[item]>

with hidden per-id weights ``w``, a dense signal ``z_d`` (the log of the dense count), and
a low-rank user x item interaction. Labels are drawn from the true probability, so the
AUC of the true probabilities on the same rows (:func:`roc_auc`) is the Bayes-optimal AUC.
Hidden weights and vectors are pure functions of (seed, slot, id rank), hashed on demand:
no tables, any vocabulary size. With ``drift`` the weights rotate towards an independent
second set as events are generated (angle ``drift`` radians per million events).

:func:`planted_interactions` is its second mode, for retrieval: a log of users choosing items
from a catalogue, with the true user and item factors kept, so the best achievable ranking is
known (its ``oracle``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

N_DENSE = 13
N_SPARSE = 26
USER_SLOT = 0
ITEM_SLOT = 1

# Per-slot vocabulary sizes: a mix of tiny, medium and huge slots like Criteo's.
DEFAULT_VOCAB = (
    200_000, 50_000, 1_000, 500_000, 300, 20, 10_000, 100, 3, 40_000, 5_000, 1_000_000, 3_000,
    25, 9_000, 800_000, 10, 4_000, 2_000, 4, 600_000, 15, 12, 100_000, 60, 70_000,
)
# Fraction of records with an empty value in the slot (or dense field).
DEFAULT_SPARSE_MISSING = tuple(0.3 if s % 7 == 5 else 0.0 for s in range(N_SPARSE))
DEFAULT_DENSE_MISSING = tuple(0.2 if d in (2, 6, 11) else 0.0 for d in range(N_DENSE))


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64 finalizer over a uint64 array (wrapping arithmetic)."""
    x = np.asarray(x, dtype=np.uint64)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _key(seed: int, stream: int, slot: int, dim: int = 0) -> np.uint64:
    return np.uint64((seed * 0x9E3779B1 + stream * 0x85EBCA77 + slot * 0xC2B2AE3D + dim * 0x27D4EB2F) & (2**64 - 1))


def _uniform(h: np.ndarray) -> np.ndarray:
    return ((h >> np.uint64(11)).astype(np.float64) + 0.5) / float(1 << 53)


def _hashed_normal(ranks: np.ndarray, key: np.uint64) -> np.ndarray:
    """A standard normal per rank, a pure function of (key, rank) (Box-Muller on two hashes)."""
    r = np.asarray(ranks, dtype=np.uint64)
    u1 = _uniform(_mix(r ^ key))
    u2 = _uniform(_mix(r + key * np.uint64(3) + np.uint64(1)))
    return np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)


@dataclass(frozen=True)
class Sample:
    """Generated records in columns.

    labels int8[n]; prob float64[n] (the true click probability);
    dense int64[n, 13] counts with dense_missing bool[n, 13];
    sparse uint32[n, 26] raw ids (what the Criteo file holds as 8 hex digits) with sparse_missing bool[n, 26];
    event_time float64[n] epoch seconds. ``user_id``/``item_id`` are the raw ids of slots 0 and 1.
    """

    labels: np.ndarray
    prob: np.ndarray
    dense: np.ndarray
    dense_missing: np.ndarray
    sparse: np.ndarray
    sparse_missing: np.ndarray
    event_time: np.ndarray

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    @property
    def user_id(self) -> np.ndarray:
        return self.sparse[:, USER_SLOT]

    @property
    def item_id(self) -> np.ndarray:
        return self.sparse[:, ITEM_SLOT]


class PlantedModel:
    """The hidden model; ``sample(n)`` draws the next ``n`` events (the clock advances for drift)."""

    def __init__(
        self,
        seed: int = 0,
        *,
        vocab: tuple[int, ...] = DEFAULT_VOCAB,
        zipf_exponent: float = 1.1,
        rank: int = 8,
        sparse_variance: float = 1.0,
        dense_variance: float = 0.25,
        interaction_variance: float = 0.35,
        ctr: float = 0.22,
        drift: float = 0.0,
        events_per_second: float = 1000.0,
        start_time: float = 1_700_000_000.0,
    ) -> None:
        if len(vocab) != N_SPARSE or min(vocab) < 1:
            raise ValueError(f"vocab needs {N_SPARSE} positive sizes")
        if zipf_exponent <= 0 or zipf_exponent == 1.0:
            raise ValueError("zipf_exponent must be positive and not 1")
        self.seed = int(seed)
        self.vocab = np.array(vocab, dtype=np.int64)
        self.zipf_exponent = zipf_exponent
        self.rank = rank
        self.dense_variance = dense_variance
        self.interaction_variance = interaction_variance
        self.drift = drift
        self.events_per_second = events_per_second
        self.start_time = start_time
        self.events = 0  # the clock: events generated so far
        rng = np.random.default_rng([self.seed, 1])
        # Slot importance decays so a few slots carry most of the signal, as in real CTR data.
        importance = np.sort(rng.uniform(0.3, 1.5, N_SPARSE))[::-1]
        self.slot_scale = importance * np.sqrt(sparse_variance / np.sum(importance**2))
        beta = rng.normal(0.0, 1.0, N_DENSE)
        self.dense_beta = beta * np.sqrt(dense_variance / np.sum(beta**2))
        self.dense_mu = rng.uniform(0.5, 3.0, N_DENSE)
        self.bias = float(np.log(ctr / (1 - ctr)))
        self._rng = np.random.default_rng([self.seed, 2])

    # -- hidden parameters -------------------------------------------------------------------

    def weights(self, slot: int, ranks: np.ndarray, *, at_event: float = 0.0) -> np.ndarray:
        """Hidden weight of the ids of ``slot`` with the given popularity ranks, at a point in time."""
        w = _hashed_normal(ranks, _key(self.seed, 1, slot))
        if self.drift:
            angle = self.drift * at_event / 1e6
            w = np.cos(angle) * w + np.sin(angle) * _hashed_normal(ranks, _key(self.seed, 2, slot))
        return self.slot_scale[slot] * w

    def vectors(self, slot: int, ranks: np.ndarray) -> np.ndarray:
        """Hidden rank-k vectors (float64[n, rank]) of user (slot 0) or item (slot 1) ids."""
        return np.stack([_hashed_normal(ranks, _key(self.seed, 3, slot, k)) for k in range(self.rank)], axis=1)

    def raw_ids(self, slot: int, ranks: np.ndarray) -> np.ndarray:
        """Popularity rank -> the 32-bit id written to the data (a fixed scramble per slot)."""
        return (_mix(np.asarray(ranks, dtype=np.uint64) ^ _key(self.seed, 4, slot)) >> np.uint64(32)).astype(np.uint32)

    # -- sampling ----------------------------------------------------------------------------

    def _zipf_ranks(self, n: int) -> np.ndarray:
        # Inverse CDF of a continuous power law on [1, V + 1), floored: Zipf-like, no tables.
        a = 1.0 - self.zipf_exponent
        top = (self.vocab.astype(np.float64) + 1.0) ** a
        u = self._rng.random((n, N_SPARSE))
        x = (1.0 + u * (top - 1.0)) ** (1.0 / a)
        return np.minimum(np.floor(x).astype(np.int64) - 1, self.vocab - 1)

    def sample(self, n: int) -> Sample:
        """Draw the next ``n`` events with their labels and true probabilities."""
        rng = self._rng
        ranks = self._zipf_ranks(n)
        sparse_missing = rng.random((n, N_SPARSE)) < np.array(DEFAULT_SPARSE_MISSING)
        sparse_missing[:, [USER_SLOT, ITEM_SLOT]] = False
        t = self.events + np.arange(n, dtype=np.float64)
        logit = np.full(n, self.bias)
        sparse = np.empty((n, N_SPARSE), dtype=np.uint32)
        for s in range(N_SPARSE):
            w = self.weights(s, ranks[:, s], at_event=float(self.events + n / 2))
            logit += np.where(sparse_missing[:, s], 0.0, w)
            sparse[:, s] = self.raw_ids(s, ranks[:, s])

        z = rng.normal(0.0, 1.0, (n, N_DENSE))
        dense_missing = rng.random((n, N_DENSE)) < np.array(DEFAULT_DENSE_MISSING)
        dense = np.maximum(np.floor(np.exp(self.dense_mu + z)) - 1.0, 0.0).astype(np.int64)
        signal = np.where(dense_missing, 0.0, z) @ self.dense_beta
        logit += signal

        u = self.vectors(USER_SLOT, ranks[:, USER_SLOT])
        v = self.vectors(ITEM_SLOT, ranks[:, ITEM_SLOT])
        logit += np.sqrt(self.interaction_variance / self.rank) * np.einsum("ij,ij->i", u, v)

        prob = 1.0 / (1.0 + np.exp(-logit))
        labels = (rng.random(n) < prob).astype(np.int8)
        event_time = self.start_time + t / self.events_per_second
        self.events += n
        return Sample(labels, prob, dense, dense_missing, sparse, sparse_missing, event_time)


def roc_auc(labels: np.ndarray, scores: np.ndarray) -> float:
    """Area under the ROC curve (ties count one half), by ranks: O(n log n), no Python loop."""
    labels = np.asarray(labels).astype(bool)
    scores = np.asarray(scores, dtype=np.float64)
    n_pos = int(labels.sum())
    n_neg = labels.shape[0] - n_pos
    if n_pos == 0 or n_neg == 0:
        raise ValueError("AUC needs both positive and negative labels")
    order = np.argsort(scores, kind="mergesort")
    sorted_scores = scores[order]
    # Average rank within each group of tied scores.
    starts = np.flatnonzero(np.r_[True, sorted_scores[1:] != sorted_scores[:-1]])
    ends = np.r_[starts[1:], sorted_scores.shape[0]]
    avg = (starts + ends + 1) / 2.0
    ranks = np.empty_like(scores)
    ranks[order] = np.repeat(avg, ends - starts)
    return float((ranks[labels].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


# ----------------------------------------------------------------------------- planted interactions

INTERACTIONS_EPOCH = 1_700_000_000  # planted interactions' timestamps start here, one event every EVENT_SECONDS
EVENT_SECONDS = 30


@dataclass(frozen=True)
class InteractionSpec:
    """The shape of a planted interaction log (:func:`planted_interactions`)."""

    events: int = 100_000
    users: int = 1_000
    items: int = 1_000
    dim: int = 16
    genres: int = 12
    tags_per_genre: int = 4
    ages: int = 6
    regions: int = 8
    scale: float = 6.0  # weight of preference against popularity in the pick
    pop_skew: float = 0.5  # item bias = -pop_skew * log(rank): Zipf-like popularity
    activity_skew: float = 0.6  # user weight ~ rank^-activity_skew
    drift: float = 1.2  # radians the users' interests rotate over the whole stream
    late_users: float = 0.1  # share of users who arrive only in the last ``late_from`` of the stream
    late_from: float = 0.9
    like_scale: float = 4.0
    like_bias: float = -1.0
    seed: int = 0


@dataclass(frozen=True)
class PlantedInteractions:
    """A planted log in time order (parallel arrays per event) with the model that drew it."""

    user: np.ndarray  # int64 user ids, 1..users
    item: np.ndarray  # int64 item ids, 1..items
    label: np.ndarray  # int8, 1 = liked
    time: np.ndarray  # int64 Unix seconds, ascending
    user_attrs: dict[int, dict[str, Any]]  # user id -> {"age", "gender", "region"}
    item_attrs: dict[int, dict[str, Any]]  # item id -> {"genre", "tags"}
    item_ids: np.ndarray  # int64, the rows of item_factors and item_bias and the oracle's columns
    item_factors: np.ndarray = field(repr=False)  # float64[items, dim], unit rows
    item_bias: np.ndarray = field(repr=False)  # float64[items]: log popularity
    # (user ids, unix time) -> float64[len(users), items]: each item's true score for the user at that time
    oracle: Callable[[np.ndarray, float], np.ndarray] = field(repr=False)

    USER_FIELDS = ("age", "gender", "region")
    ITEM_FIELDS = ("genre", "tags")


def _unit_rows(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _factor(u0: np.ndarray, u1: np.ndarray, rows: np.ndarray, angle: np.ndarray) -> np.ndarray:
    c, s = np.cos(angle)[:, None], np.sin(angle)[:, None]
    return c * u0[rows] + s * u1[rows]


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


@dataclass(frozen=True)
class PlantedWorld:
    """The users and items of a planted log (:func:`planted_world`): their attributes and true factors."""

    age: np.ndarray
    gender: np.ndarray
    region: np.ndarray
    u0: np.ndarray  # float64[users, dim]: each user's factor at the stream's start, unit rows
    u1: np.ndarray  # the drift target, orthogonal to u0
    genre: np.ndarray
    v: np.ndarray  # float64[items, dim]: item factors, unit rows
    bias: np.ndarray  # float64[items]: log popularity

    def user_factors(self, rows: np.ndarray, angle: np.ndarray) -> np.ndarray:
        """The factors of users ``rows`` (0-based) rotated by ``angle`` radians towards their drift target."""
        return _factor(self.u0, self.u1, rows, angle)

    def attributes(self, spec: InteractionSpec, rng: np.random.Generator) -> tuple[dict, dict]:
        """User id -> {age, gender, region} and item id -> {genre, tags} (two tags drawn from the genre's)."""
        genders = ("F", "M")
        users = {k + 1: {"age": f"a{self.age[k]}", "gender": genders[self.gender[k]], "region": f"r{self.region[k]}"}
                 for k in range(spec.users)}
        items = {}
        for k in range(spec.items):
            g = int(self.genre[k])
            tags = rng.choice(spec.tags_per_genre, size=2, replace=False)
            items[k + 1] = {"genre": f"g{g}", "tags": [f"t{g}.{int(x)}" for x in sorted(tags)]}
        return users, items


def planted_world(spec: InteractionSpec, rng: np.random.Generator) -> PlantedWorld:
    """Users whose factor is their attributes' factors plus their own, with an orthogonal drift target;
    items whose factor is their genre's centre plus their own; popularity by a random Zipf rank."""
    d = spec.dim
    age = rng.integers(0, spec.ages, spec.users)
    gender = rng.integers(0, 2, spec.users)
    region = rng.integers(0, spec.regions, spec.users)
    f_age, f_gender, f_region = (rng.normal(size=(n, d)) for n in (spec.ages, 2, spec.regions))
    u0 = _unit_rows(0.6 * (f_age[age] + f_gender[gender] + f_region[region]) + rng.normal(size=(spec.users, d)))
    u1 = rng.normal(size=(spec.users, d))
    u1 = _unit_rows(u1 - (u1 * u0).sum(1, keepdims=True) * u0)
    genre = rng.integers(0, spec.genres, spec.items)
    centres = rng.normal(size=(spec.genres, d))
    v = _unit_rows(centres[genre] + 0.8 * rng.normal(size=(spec.items, d)))
    bias = -spec.pop_skew * np.log(1.0 + rng.permutation(spec.items))
    return PlantedWorld(age, gender, region, u0, u1, genre, v, bias)


def planted_interactions(spec: InteractionSpec = InteractionSpec()) -> PlantedInteractions:
    """Users with attributes (age, gender, region) whose latent factor is the sum of their attributes'
    factors plus their own, drifting over the stream (rotating from ``u0`` towards ``u1``: interests
    change with time); items with a genre and tags whose latent factor is their genre's centre plus
    their own, and a Zipf popularity bias. Each event draws a user by a skewed activity, then the item
    the user picks by a softmax over ``scale * u(t).v + bias`` (Gumbel-max), then a label (liked) with
    probability ``sigmoid(like_scale * u(t).v + like_bias)``. The oracle scores items by the true
    log-probability of a liked pick at a given time."""
    rng = np.random.default_rng(spec.seed)
    w = planted_world(spec, rng)
    u0, u1, v, bias = w.u0, w.u1, w.v, w.bias
    activity = (1.0 + rng.permutation(spec.users)) ** -spec.activity_skew
    activity /= activity.sum()

    user_ids = np.arange(1, spec.users + 1, dtype=np.int64)
    item_ids = np.arange(1, spec.items + 1, dtype=np.int64)
    n = spec.events
    frac = np.arange(n) / max(n - 1, 1)
    late = rng.random(spec.users) < spec.late_users
    early_activity = np.where(late, 0.0, activity)
    users = np.where(frac < spec.late_from, rng.choice(spec.users, size=n, p=early_activity / early_activity.sum()),
                     rng.choice(spec.users, size=n, p=activity))
    picks = np.empty(n, np.int64)
    likes = np.empty(n, np.int8)
    for a in range(0, n, 4096):
        b = min(n, a + 4096)
        u = _factor(u0, u1, users[a:b], frac[a:b] * spec.drift)
        logits = spec.scale * (u @ v.T) + bias
        picks[a:b] = np.argmax(logits + rng.gumbel(size=logits.shape), axis=1)
        affinity = (u * v[picks[a:b]]).sum(1)
        likes[a:b] = rng.random(b - a) < sigmoid(spec.like_scale * affinity + spec.like_bias)
    times = INTERACTIONS_EPOCH + EVENT_SECONDS * np.arange(n, dtype=np.int64)

    def oracle(uids: np.ndarray, t: float) -> np.ndarray:
        """log P(pick i) + log P(like i) of each user at time ``t`` (up to a per-user constant)."""
        rows = np.asarray(uids, np.int64) - 1
        angle = np.full(rows.shape[0], spec.drift * (t - INTERACTIONS_EPOCH) / (EVENT_SECONDS * max(n - 1, 1)))
        u = _factor(u0, u1, rows, angle)
        aff = u @ v.T
        return spec.scale * aff + bias + np.log(sigmoid(spec.like_scale * aff + spec.like_bias))

    user_attrs, item_attrs = w.attributes(spec, rng)
    return PlantedInteractions(user_ids[users], item_ids[picks], likes, times, user_attrs, item_attrs, item_ids, v,
                               bias, oracle)
