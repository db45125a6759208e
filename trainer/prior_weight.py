"""The popularity prior's weight a bundle carries, chosen by the job on its own latest records.

The service re-ranks a known user's candidates by the model's score and the items' decayed counts
(exports.popularity_rerank); how much weight the counts deserve depends on the data: a log whose
picks follow what is popular now gains from them, one where the model already knows the users loses.
So the chief remembers its latest positive records with a history (:class:`RecentPositives`) and
replays the service's re-rank on its users' next picks (:class:`PriorWeigher`): at an export it
keeps what that bundle would serve a few hundred of its latest users (their queries after their
newest record, the bundle's items and the job's counts); at an export some seconds later, each of
those users' records since is a pick the kept bundle could have been asked for, scored for every
weight of a grid (0, the model alone, first) by whether the re-rank of the user's top candidates,
less its history, holds it in the top ``k`` (:func:`choose_weight`). The picks came after the kept bundle: no model or
count it replays has seen them. The grid's hits are summed over replays, older ones weighing less;
the weight with the most (ties: the smaller) goes into the next bundle, and with
``service.popularity_prior.weight: auto`` the service serves it.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

import numpy as np

from exports.popularity_rerank import DEFAULT_CANDIDATES, prior_terms
from logrecords.batch import Batch, concat_batches, take_ragged
from logrecords.schema_config import SchemaConfig
from models.base import Model
from models.features import build_features
from models.item_popularity import Counts
from models.model_config import ModelConfig, ModelType
from models.two_tower import as_two_tower
from ps.client import PSClient

WEIGHTS = (0.0, 0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)  # the standardized scale's grid, 0 (the model alone) first
USERS = 400  # the users whose queries each bundle keeps
TRIALS = 800  # next picks replayed at each export at most
MIN_TRIALS = 200  # next picks replayed before a weight is chosen (the service's fallback weight till then)
DECAY = 0.8  # a replay's hits weigh this much less at each later one: the choice follows the data
# seconds between replays at least once a weight is chosen (before, one at each export): a bundle's queries wait
# for the picks of that long, and the replay's cost stays a small share of the chief's time however often passes
# export
REPLAY_EVERY_S = 10.0
REMEMBERED = 8192  # positive records with a history kept for the replay
K = 10  # the list length the replay scores (the hit rate at k)
SCORE_CELLS = 1 << 22  # user-by-item scores computed at once: bounds the replay's memory on a large catalogue


class RecentPositives:
    """The newest ``capacity`` records with a label > 0, a user, an item and a non-empty ``history_slot``."""

    def __init__(self, history_slot: str | None, capacity: int = REMEMBERED) -> None:
        self.history_slot = history_slot
        self.capacity = capacity
        self._parts: list[Batch] = []
        self._n = 0
        self.total = 0  # records remembered since the start: the newest one's sequence number + 1

    def observe(self, batch: Batch) -> None:
        slot = self.history_slot
        if slot is None or batch.user_id is None or batch.item_id is None or slot not in batch.slots:
            return
        offsets = batch.slots[slot][1]
        keep = np.flatnonzero((batch.labels > 0) & (batch.user_id != 0) & (batch.item_id != 0)
                              & (offsets[1:] > offsets[:-1]))
        if keep.shape[0] == 0:
            return
        part = batch.take(keep[-self.capacity:])
        self._parts.append(part)
        self._n += len(part)
        self.total += len(part)
        while self._n - len(self._parts[0]) >= self.capacity:
            self._n -= len(self._parts.pop(0))

    def snapshot(self) -> Remembered | None:
        """A copy of the remembered records, oldest first (None when there are none)."""
        if not self._parts:
            return None
        both = concat_batches(self._parts)
        both = both if len(both) <= self.capacity else both.take(np.arange(len(both) - self.capacity, len(both)))
        return Remembered(both, self.total)


@dataclass(frozen=True)
class Remembered:
    """A :class:`RecentPositives` snapshot: ``batch`` the records, the last one's sequence number ``end`` - 1."""

    batch: Batch
    end: int

    def since(self, end: int) -> np.ndarray:
        """Rows of the records remembered after a snapshot whose ``end`` was ``end``."""
        first = self.end - len(self.batch)
        return np.arange(max(end - first, 0), len(self.batch))


def newest_per_user(batch: Batch, users: int, seed: int) -> np.ndarray:
    """Rows of ``batch``: each user's last one, ``users`` of those users at most (a seeded sample), in row order."""
    assert batch.user_id is not None
    n = len(batch)
    _, at = np.unique(batch.user_id[::-1], return_index=True)
    last = np.sort(n - 1 - at)
    if last.shape[0] > users:
        last = np.sort(np.random.default_rng(seed).choice(last, users, replace=False))
    return last


def log1p_of(counts: Counts, items: np.ndarray) -> np.ndarray:
    """log1p(count) of each of ``items`` (any shape; 0 for an item without a count)."""
    ids, c, _ = counts
    if ids.shape[0] == 0:
        return np.zeros(items.shape, np.float32)
    at = np.minimum(np.searchsorted(ids, items), ids.shape[0] - 1)
    return np.where(ids[at] == items, np.log1p(c[at]), 0.0).astype(np.float32)


def candidates_of(users: np.ndarray, item_ids: np.ndarray, item_vectors: np.ndarray, excluded: tuple[np.ndarray,
                  np.ndarray], candidates: int) -> tuple[np.ndarray, np.ndarray]:
    """Each user's top ``candidates`` items by inner product (in no order), less its ``excluded`` (ragged: values,
    offsets): ids int-indexed into ``item_ids`` and their scores, both [users, c] (c: at most the items left)."""
    n, m = users.shape[0], item_ids.shape[0]
    values, offsets = excluded
    lengths = np.diff(offsets)
    at = np.minimum(np.searchsorted(item_ids, values), max(m - 1, 0))
    hit = (m > 0) & (item_ids[at] == values)
    rows = np.repeat(np.arange(n), lengths)
    most_excluded = int(np.bincount(rows[hit], minlength=n).max()) if n and hit.any() else 0
    c = max(0, min(candidates, m - most_excluded))
    ids, scores = np.empty((n, c), np.int64), np.empty((n, c), np.float32)
    step = max(1, SCORE_CELLS // max(m, 1))
    for lo in range(0, n, step):  # a few blocks of users: the scores of a block fit SCORE_CELLS
        hi = min(n, lo + step)
        s = users[lo:hi] @ item_vectors.T
        mine = hit & (rows >= lo) & (rows < hi)
        s[rows[mine] - lo, at[mine]] = -np.inf
        top = np.argpartition(-s, c - 1, axis=1)[:, :c] if 0 < c < m else np.tile(np.arange(c), (hi - lo, 1))
        ids[lo:hi] = top  # in no order: the re-rank's sums do not depend on it
        scores[lo:hi] = np.take_along_axis(s, top, axis=1)
    return ids, scores


@dataclass(frozen=True)
class WeightChoice:
    """The replay's outcome: the chosen ``weight`` and each grid weight's hit rate at ``k`` over ``picks``."""

    weight: float
    hit_rates: dict[float, float]
    picks: int
    candidates: int
    k: int

    def manifest(self) -> dict[str, object]:
        """What the bundle's manifest holds (exports.bundle ``popularity_weight``)."""
        return {"weight": self.weight, "scale": "standardized", "picks": self.picks, "candidates": self.candidates,
                "k": self.k, "hit_rates": {f"{w:g}": round(r, 6) for w, r in self.hit_rates.items()}}


def choose_weight(users: np.ndarray, targets: np.ndarray, excluded: tuple[np.ndarray, np.ndarray],
                  item_ids: np.ndarray, item_vectors: np.ndarray, counts: Counts, *, asked_by: np.ndarray | None = None,
                  weights: tuple[float, ...] = WEIGHTS, candidates: int = DEFAULT_CANDIDATES, k: int = K,
                  temperature: float = 1.0) -> WeightChoice | None:
    """The weight of ``weights`` under which the service's re-rank (standardized scale) of each user's top
    ``candidates`` (``users``: query vectors; ``item_ids`` sorted, with ``item_vectors``; less ``excluded``) holds
    the ``targets`` items in the top ``k`` most often, ``counts`` the items' decayed counts. ``asked_by``: the user
    of each target (default: target ``i`` is user ``i``'s). None without targets or items."""
    asked_by = np.arange(users.shape[0]) if asked_by is None else np.asarray(asked_by, np.int64)
    if asked_by.shape[0] == 0 or item_ids.shape[0] == 0:
        return None
    pos, scores = candidates_of(users, item_ids, item_vectors, excluded, candidates)
    logc = log1p_of(counts, item_ids)[pos]
    targets = np.asarray(targets, np.uint64)
    at = np.minimum(np.searchsorted(item_ids, targets), item_ids.shape[0] - 1)
    wanted = np.where(item_ids[at] == targets, at, -1)[:, None]  # a target not among the items: never a hit
    model, prior = prior_terms(scores, logc, temperature, "standardized")  # the re-rank is model + w * prior
    rates: dict[float, float] = {}
    for w in sorted(weights):  # a handful of weights, each one pass over every user's candidates
        z = model + np.float32(w) * prior
        top = np.argpartition(-z, k - 1, axis=1)[:, :k] if k < z.shape[1] else np.argsort(-z, axis=1)
        listed = np.take_along_axis(pos, top, axis=1)  # each user's top k, as item positions
        rates[w] = float((listed[asked_by] == wanted).any(axis=1).mean())
    best = max(rates.values())
    return WeightChoice(min(w for w, r in rates.items() if r >= best), rates, int(asked_by.shape[0]),
                        int(pos.shape[1]), k)


def with_own_item(batch: Batch, slot: str, length: int) -> tuple[np.ndarray, np.ndarray]:
    """Each record's history in ``slot`` (newest first) with its own item in front, at most ``length`` items: the
    user's history once the record is in it, as the service reads it after the record."""
    assert batch.item_id is not None
    values, offsets = batch.slots[slot]
    n = len(batch)
    old = np.minimum(np.diff(offsets), max(length - 1, 0))
    new_offsets = np.zeros(n + 1, np.int64)
    np.cumsum(old + 1, out=new_offsets[1:])
    out = np.empty(int(new_offsets[-1]), np.uint64)
    out[new_offsets[:-1]] = batch.item_id
    row = np.repeat(np.arange(n), old)
    j = np.arange(row.shape[0]) - np.repeat(np.cumsum(old) - old, old)  # the position inside the old history
    out[new_offsets[row] + 1 + j] = values[offsets[row] + j]
    return out, new_offsets


@dataclass(frozen=True)
class Queries:
    """What one bundle would serve a few users: their ids (sorted), query vectors and histories (ragged, excluded
    from their lists), the bundle's items (ids sorted, vectors) and the job's counts, and the ``end`` of the
    records it was made from."""

    users: np.ndarray
    vectors: np.ndarray
    history: tuple[np.ndarray, np.ndarray]
    items: tuple[np.ndarray, np.ndarray]
    counts: Counts
    end: int


class PriorWeigher:
    """The exporter's choice of the weight (the module docstring): at an export the queries of a bundle's users are
    kept; at the next export (once a weight is chosen: the first one ``REPLAY_EVERY_S`` later), each of those
    users' records since is a next pick the kept bundle would have been asked for, and that export's queries are
    kept. The grid's hits are summed over replays, the older ones weighing ``DECAY`` less per replay; the exports
    between carry the choice so far."""

    def __init__(self, history_slot: str, history_length: int, *, users: int = USERS, trials: int = TRIALS) -> None:
        self.history_slot = history_slot
        self.history_length = history_length
        self.users = users
        self.trials = trials
        self.kept: Queries | None = None
        self.kept_at = 0.0  # time.monotonic() when ``kept`` was made
        self.hits: dict[float, float] = dict.fromkeys(WEIGHTS, 0.0)
        self.asked = 0.0  # next picks replayed, decayed as the hits are

    def weigh(self, model: Model, client: PSClient, recent: Remembered, items: tuple[np.ndarray, np.ndarray],
              counts: Counts, *, seed: int = 0) -> WeightChoice | None:
        """Score the kept bundle on the picks since it, keep this one's queries; the choice so far (None before
        ``MIN_TRIALS`` picks were replayed)."""
        now = time.monotonic()
        # once a weight is chosen, the picks since gather for a while before the next replay
        if self.kept is not None and self.asked >= MIN_TRIALS and now - self.kept_at < REPLAY_EVERY_S:
            return self.choice(replayed_candidates(self.kept))
        if self.kept is not None:
            self._score(self.kept, recent, seed)
        self.kept, self.kept_at = self._queries(model, client, recent, items, counts, seed), now
        return self.choice(replayed_candidates(self.kept))

    def choice(self, candidates: int) -> WeightChoice | None:
        if self.asked < MIN_TRIALS:
            return None
        rates = {w: h / self.asked for w, h in self.hits.items()}
        best = max(rates.values())
        return WeightChoice(min(w for w, r in rates.items() if r >= best), rates, round(self.asked), candidates,
                            K)

    def _score(self, kept: Queries, recent: Remembered, seed: int) -> None:
        batch = recent.batch
        assert batch.user_id is not None and batch.item_id is not None
        rows = recent.since(kept.end)
        at = np.minimum(np.searchsorted(kept.users, batch.user_id[rows]), max(kept.users.shape[0] - 1, 0))
        mine = (kept.users.shape[0] > 0) & (kept.users[at] == batch.user_id[rows])
        rows, at = rows[mine], at[mine]
        if rows.shape[0] > self.trials:
            pick = np.sort(np.random.default_rng(seed).choice(rows.shape[0], self.trials, replace=False))
            rows, at = rows[pick], at[pick]
        asked, asked_by = np.unique(at, return_inverse=True)  # each kept user's list once, however many picks
        got = choose_weight(kept.vectors[asked], batch.item_id[rows], take_ragged(*kept.history, asked), *kept.items,
                            kept.counts, asked_by=asked_by)
        for w in self.hits:
            self.hits[w] *= DECAY
        self.asked *= DECAY
        if got is None:
            return
        for w, r in got.hit_rates.items():
            self.hits[w] += r * got.picks
        self.asked += got.picks

    def _queries(self, model: Model, client: PSClient, recent: Remembered, items: tuple[np.ndarray, np.ndarray],
                 counts: Counts, seed: int) -> Queries:
        """The queries of up to ``users`` users of ``recent``, each after its newest remembered record."""
        tower = as_two_tower(model)
        batch = recent.batch.take(newest_per_user(recent.batch, self.users, seed))
        assert batch.user_id is not None
        history = with_own_item(batch, self.history_slot, self.history_length)
        batch = dataclasses.replace(batch, slots={**batch.slots, self.history_slot: history})
        f = build_features(model.config, batch, tower.user_slots)
        pulled = {t: client.wait(client.pull(t, ti.keys)) for t, ti in f.tables.items()}
        vectors = np.ascontiguousarray(tower.user_vectors(f, pulled), np.float32)
        order = np.argsort(batch.user_id, kind="stable")
        return Queries(batch.user_id[order], vectors[order], take_ragged(*history, order), items, counts, recent.end)


def replayed_candidates(kept: Queries) -> int:
    """The candidates a replay re-ranks: the service's default, at most the items."""
    return min(DEFAULT_CANDIDATES, kept.items[0].shape[0])


def history_slot_of(schema: SchemaConfig | None, model: ModelConfig) -> str | None:
    """The two_tower ``model``'s user history slot under ``schema`` (None: no prior to weigh, as the service serves
    the model's ranking to a user without a history)."""
    if schema is None or schema.history is None or model.type is not ModelType.TWO_TOWER:
        return None
    name = schema.history.slot
    return name if any(s.name == name for s in model.slots) else None
