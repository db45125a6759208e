"""The popularity prior's weight a bundle carries, chosen by the job on its own latest records.

The service re-ranks a known user's candidates by the model's score and the items' decayed counts
(exports.popularity_rerank); how much weight the counts deserve depends on the data: a log whose
picks follow what is popular now gains from them, one where the model already knows the users loses.
So the chief remembers its latest positive records with a history (:class:`RecentPositives`) and, at
each export, replays the service's re-rank on them (:func:`choose_weight`): for a sample of users, the
query is the user's newest remembered record (its history holds the items before it, as the service's
would), the target that record's item, the candidates the bundle's items less the history's, scored
by the bundle's towers, and the counts the job's, less the targets' own records. The weight of the
grid whose top ``k`` holds the most targets goes into the bundle (ties: the smaller); with
``service.popularity_prior.weight: auto`` the service serves it.

The model has trained on the targets once, as it trained on every record before the export: the
replay asks how well a bundle ranks what its users just chose, the nearest the job has to their next
choices.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from exports.popularity_rerank import DEFAULT_CANDIDATES, prior_terms
from logrecords.batch import Batch, concat_batches
from logrecords.schema_config import SchemaConfig
from models.base import Model
from models.features import build_features
from models.item_popularity import Counts
from models.model_config import ModelConfig, ModelType
from models.two_tower import as_two_tower
from ps.client import PSClient

WEIGHTS = (0.0, 0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)  # the standardized scale's grid, 0 (the model alone) first
USERS = 400  # the users whose newest record is replayed
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
        while self._n - len(self._parts[0]) >= self.capacity:
            self._n -= len(self._parts.pop(0))

    def snapshot(self) -> Batch | None:
        """A copy of the remembered records, oldest first (None when there are none)."""
        if not self._parts:
            return None
        both = concat_batches(self._parts)
        return both if len(both) <= self.capacity else both.take(np.arange(len(both) - self.capacity, len(both)))


def newest_per_user(batch: Batch, users: int, seed: int) -> np.ndarray:
    """Rows of ``batch``: each user's last one, ``users`` of those users at most (a seeded sample), in row order."""
    assert batch.user_id is not None
    n = len(batch)
    _, at = np.unique(batch.user_id[::-1], return_index=True)
    last = np.sort(n - 1 - at)
    if last.shape[0] > users:
        last = np.sort(np.random.default_rng(seed).choice(last, users, replace=False))
    return last


def counts_without(counts: Counts, items: np.ndarray, times: np.ndarray, half_life_s: float) -> Counts:
    """``counts`` less one record of each of ``items`` at ``times`` (those counted in them), floored at 0."""
    ids, c, as_of = counts
    c = np.array(c, np.float64)
    at = np.minimum(np.searchsorted(ids, items), max(ids.shape[0] - 1, 0))
    found = (ids.shape[0] > 0) & (ids[at] == items) & np.isfinite(times)
    weights = np.exp2(-np.maximum(as_of - times[found], 0.0) / half_life_s)
    np.subtract.at(c, at[found], weights)
    return ids, np.maximum(c, 0.0), as_of


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
    """The replay's outcome: the chosen ``weight`` and each grid weight's hit rate at ``k`` over ``users``."""

    weight: float
    hit_rates: dict[float, float]
    users: int
    candidates: int
    k: int

    def manifest(self) -> dict[str, object]:
        """What the bundle's manifest holds (exports.bundle ``popularity_weight``)."""
        return {"weight": self.weight, "scale": "standardized", "users": self.users, "candidates": self.candidates,
                "k": self.k, "hit_rates": {f"{w:g}": round(r, 6) for w, r in self.hit_rates.items()}}


def choose_weight(users: np.ndarray, targets: np.ndarray, excluded: tuple[np.ndarray, np.ndarray],
                  item_ids: np.ndarray, item_vectors: np.ndarray, counts: Counts, *,
                  weights: tuple[float, ...] = WEIGHTS, candidates: int = DEFAULT_CANDIDATES, k: int = K,
                  temperature: float = 1.0) -> WeightChoice | None:
    """The weight of ``weights`` under which the service's re-rank (standardized scale) of each user's top
    ``candidates`` (``users``: query vectors; ``item_ids`` sorted, with ``item_vectors``; less ``excluded``) holds
    its ``targets`` item in the top ``k`` most often, ``counts`` the items' decayed counts; None without users."""
    if users.shape[0] == 0 or item_ids.shape[0] == 0:
        return None
    pos, scores = candidates_of(users, item_ids, item_vectors, excluded, candidates)
    logc = log1p_of(counts, item_ids)[pos]
    targets = np.asarray(targets, np.uint64)
    at = np.minimum(np.searchsorted(item_ids, targets), item_ids.shape[0] - 1)
    is_target = pos == np.where(item_ids[at] == targets, at, -1)[:, None]  # a target not among the items: no hit
    model, prior = prior_terms(scores, logc, temperature, "standardized")  # the re-rank is model + w * prior
    rates: dict[float, float] = {}
    for w in sorted(weights):  # a handful of weights, each one pass over every user's candidates
        z = model + np.float32(w) * prior
        top = np.argpartition(-z, k - 1, axis=1)[:, :k] if k < z.shape[1] else np.argsort(-z, axis=1)
        rates[w] = float(np.take_along_axis(is_target, top, axis=1).any(axis=1).mean())
    best = max(rates.values())
    return WeightChoice(min(w for w, r in rates.items() if r >= best), rates, int(users.shape[0]), int(pos.shape[1]),
                        k)


def replay_choice(model: Model, client: PSClient, recent: Batch, history_slot: str,
                  items: tuple[np.ndarray, np.ndarray], counts: Counts, *, seed: int = 0,
                  users: int = USERS) -> WeightChoice | None:
    """:func:`choose_weight` on the newest remembered record of ``users`` users of ``recent`` (a
    :class:`RecentPositives` snapshot, their history in ``history_slot``): their queries from the two_tower
    ``model`` (its sparse rows pulled through ``client``), ``items`` the bundle's whole item set (ids sorted,
    vectors), ``counts`` the job's."""
    tower = as_two_tower(model)
    batch = recent.take(newest_per_user(recent, users, seed))
    assert batch.item_id is not None
    f = build_features(model.config, batch, tower.user_slots)
    pulled = {t: client.wait(client.pull(t, ti.keys)) for t, ti in f.tables.items()}
    queries = np.ascontiguousarray(tower.user_vectors(f, pulled), np.float32)
    times = batch.event_time if batch.event_time is not None else np.full(
        len(batch), np.nan if batch.received_at is None else batch.received_at, np.float64)
    retrieval = model.config.retrieval
    return choose_weight(queries, batch.item_id, batch.slots[history_slot], items[0], items[1],
                         counts_without(counts, batch.item_id, times, retrieval.popularity_half_life_s),
                         temperature=retrieval.temperature)


def history_slot_of(schema: SchemaConfig | None, model: ModelConfig) -> str | None:
    """The two_tower ``model``'s user history slot under ``schema`` (None: no prior to weigh, as the service serves
    the model's ranking to a user without a history)."""
    if schema is None or schema.history is None or model.type is not ModelType.TWO_TOWER:
        return None
    name = schema.history.slot
    return name if any(s.name == name for s in model.slots) else None
