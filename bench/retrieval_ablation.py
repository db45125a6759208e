"""Ablations of ``bench/retrieval.py --ablate``: what the strong simple baselines know, added to the
served model's own scores (asked with ``popularity_weight`` 0: without the service's own prior), each
row measured on the same served run as streamrec's served lists; the model's own lists are a row too.

- **Popularity prior** (recommend): each of a user's served top ``BENCH_PRIOR_WIDE`` items re-ranked by
  ``score / temperature + w * log1p(c)``, ``c`` the item's train positives (``every``: records)
  decayed with a half-life (a share of the train part's events; None: no decay, the all-time
  count), the weight ``w`` apart for users seen in train and users new to the holdout. A new
  user's weight may be ``inf``: the decayed list itself (the trending list).
- **Item-rate prior** (predict): ``logit(p) + g * logit(rate)``, ``rate`` the item's smoothed train
  positive rate (the item-rate baseline's score).

- **The service's prior** (bench/retrieval_prior.py): the service's own re-rank, each of its scales with the
  half-life and weight chosen on the validation split.

The half-life and the weights are chosen on a validation split carved from the train part (its
last 10% by time, the model replayed on the rest), never on the holdout; the chosen ones are then
applied to each holdout run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from bench import retrieval_prior
from bench.retrieval_baselines import RECENT_HALF_LIFE, decayed_counts
from bench.retrieval_data import Split
from bench.retrieval_metrics import auc, cut_excluding, score_lists

HALF_LIVES: tuple[float | None, ...] = (RECENT_HALF_LIFE / 2, RECENT_HALF_LIFE, 2 * RECENT_HALF_LIFE,
                                        4 * RECENT_HALF_LIFE, 0.25, None)
PRIOR_WEIGHTS = (0.0, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0)
NEW_USER_WEIGHTS = (*PRIOR_WEIGHTS, float("inf"))
PREDICT_WEIGHTS = (0.0, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0)
WIDE = 1000  # the model-alone items asked per user: the service's prior re-ranks its first `candidates`
BENCH_PRIOR_WIDE = 300  # the bench-only priors re-rank the first 300
MODEL_ALONE = "streamrec, model alone (popularity_weight 0)"

Scored = dict[int, tuple[np.ndarray, np.ndarray]]


@dataclass(frozen=True)
class Prior:
    half_life: float | None
    every: bool
    weight_seen: float
    weight_new: float


def log_prior(split: Split, half_life: float | None, every: bool) -> Callable[[np.ndarray], np.ndarray]:
    """ids -> log1p of their decayed train counts (0 for items without one)."""
    items, score = decayed_counts(split, half_life, every)
    logc = np.log1p(score)

    def of(ids: np.ndarray) -> np.ndarray:
        at = np.minimum(np.searchsorted(items, ids), len(items) - 1)
        return np.where(items[at] == ids, logc[at], 0.0)

    return of


def trending(split: Split, half_life: float | None, every: bool) -> list[int]:
    items, score = decayed_counts(split, half_life, every)
    return items[np.lexsort((items, -score))].tolist()


def reranked(scored: Scored, split: Split, prior: Prior, temperature: float, k: int) -> dict[int, list[int]]:
    """Each user's served items re-ranked by the prior; a new user at weight inf gets the trending list."""
    of = log_prior(split, prior.half_life, prior.every)
    trend = trending(split, prior.half_life, prior.every) if np.isinf(prior.weight_new) else []
    lists: dict[int, list[int]] = {}
    for u, (ids, scores) in scored.items():
        w = prior.weight_seen if u in split.seen else prior.weight_new
        if np.isinf(w):
            lists[u] = cut_excluding(trend, split.seen.get(u, ()), k)
            continue
        ids, scores = ids[:BENCH_PRIOR_WIDE], scores[:BENCH_PRIOR_WIDE]
        z = scores / temperature + w * of(ids)
        lists[u] = ids[np.argsort(-z, kind="stable")][:k].tolist()
    return lists


def _recall(lists: dict[int, list[int]], split: Split, users: set[int], k: int) -> float:
    got = score_lists(lists, split.truth, catalogue=len(split.catalogue), k=k, subset=users)
    return 0.0 if got["users"] == 0 else float(got["recall"])


def tune_prior(scored: Scored, split: Split, temperature: float, k: int) -> tuple[Prior, float, list[dict[str, Any]]]:
    """The half-life, record kind and the seen and new users' weights with the best recall@k on ``split``
    (the validation split), that recall, and the best of each half-life and record kind (the grid)."""
    seen = {u for u in scored if u in split.seen}
    new = set(scored) - seen
    n = max(1, len(scored))
    best: tuple[Prior, float] | None = None
    grid: list[dict[str, Any]] = []
    for half_life in HALF_LIVES:
        for every in (False, True):
            ws = max(PRIOR_WEIGHTS, key=lambda w: _recall(
                reranked(scored, split, Prior(half_life, every, w, 0.0), temperature, k), split, seen, k))
            wn = max(NEW_USER_WEIGHTS, key=lambda w: _recall(
                reranked(scored, split, Prior(half_life, every, 0.0, w), temperature, k), split, new, k))
            prior = Prior(half_life, every, ws, wn)
            lists = reranked(scored, split, prior, temperature, k)
            total = (_recall(lists, split, seen, k) * len(seen) + _recall(lists, split, new, k) * len(new)) / n
            grid.append({**asdict(prior), "recall": total})
            if best is None or total > best[1]:
                best = (prior, total)
    assert best is not None
    return (*best, grid)


def _logit(p: np.ndarray) -> np.ndarray:
    p = np.clip(p, 1e-6, 1 - 1e-6)
    return np.log(p / (1 - p))


def tune_predict(labels: np.ndarray, scores: np.ndarray, rate: np.ndarray) -> float:
    """The item-rate prior's weight with the best AUC on ``split`` (the validation split)."""
    ok = ~np.isnan(scores)
    return max(PREDICT_WEIGHTS, key=lambda g: auc(labels[ok], _logit(scores[ok]) + g * _logit(rate[ok])))


@dataclass(frozen=True)
class Tuned:
    prior: Prior
    prior_no_decay: Prior
    prior_seen_only: Prior
    predict_weight: float
    validation: dict[str, Any]
    served: tuple[retrieval_prior.ServedPrior, ...] = ()  # the service's prior, each scale's choice
    defaults: retrieval_prior.ServedPrior | None = None  # the service's prior as the config's defaults give it


def tune(scored: Scored, split: Split, temperature: float, k: int, predict: np.ndarray,
         rate: np.ndarray, defaults: retrieval_prior.ServedPrior | None = None) -> Tuned:
    prior, recall, grid = tune_prior(scored, split, temperature, k)
    no_decay = max((Prior(None, e, w, 0.0) for e in (False, True) for w in PRIOR_WEIGHTS),
                   key=lambda p: _recall(reranked(scored, split, p, temperature, k), split, set(scored), k))
    seen_only = Prior(prior.half_life, prior.every, prior.weight_seen, 0.0)
    g = tune_predict(split.test.label, predict, rate)
    plain = _recall({u: ids[:k].tolist() for u, (ids, _) in scored.items()}, split, set(scored), k)
    served, served_recall, served_grid = [], {}, {}
    for scale in retrieval_prior.WEIGHTS:
        chosen, got, g_grid = retrieval_prior.tune(scored, split, temperature, k, scale)
        served.append(chosen)
        served_recall[scale], served_grid[scale] = got, g_grid
    return Tuned(prior, no_decay, seen_only, g,
                 {"users": len(scored), "recall_served": plain, "recall_with_prior": recall, "grid": grid,
                  "served_recall": served_recall, "served_grid": served_grid}, tuple(served), defaults)


def served_row_name(scale: str) -> str:
    return f"+ service's prior, {scale}"


def rows(scored: Scored, split: Split, tuned: Tuned, temperature: float, k: int, predict: np.ndarray,
         rate: np.ndarray, metrics: Callable[[dict[int, list[int]], Split], dict[str, Any]]) -> dict[str, Any]:
    """The ablation rows of one holdout run: recall rows per prior, and the predict AUC with the item-rate prior."""
    new_users = {u for u in split.truth if u not in split.seen}
    out: dict[str, Any] = {}
    own = {u: ids[:k].tolist() for u, (ids, _) in scored.items()}  # the served model's ranking, no prior
    out[MODEL_ALONE] = {**metrics(own, split), "recall_new_users": _recall(own, split, new_users, k), "prior": None}
    for name, prior in (("+ popularity prior, no decay", tuned.prior_no_decay),
                        ("+ decayed popularity prior, seen users", tuned.prior_seen_only),
                        ("+ decayed popularity prior, all users", tuned.prior)):
        lists = reranked(scored, split, prior, temperature, k)
        out[name] = {**metrics(lists, split), "recall_new_users": _recall(lists, split, new_users, k),
                     "prior": asdict(prior)}
    chosen_rows = [(served_row_name(p.scale), p) for p in tuned.served]
    if tuned.defaults is not None:
        chosen_rows.append(("+ service's prior, the config's defaults", tuned.defaults))
    for name, chosen in chosen_rows:
        lists = retrieval_prior.served_lists(scored, split, chosen, temperature, k)
        out[name] = {**metrics(lists, split),
                     "recall_new_users": _recall(lists, split, new_users, k), "prior": asdict(chosen)}
    ok = ~np.isnan(predict)
    out["predict_auc_with_item_rate"] = (auc(split.test.label[ok], _logit(predict[ok]) +
                                             tuned.predict_weight * _logit(rate[ok])) if ok.any() else float("nan"))
    return out


def summary(per_run: list[dict[str, Any]]) -> dict[str, Any]:
    """The rows' means over the runs, with recall's min and max."""
    out: dict[str, Any] = {}
    for name, first in per_run[0].items():
        if not isinstance(first, dict):
            out[name] = float(np.mean([r[name] for r in per_run]))
            continue
        recalls = [r[name]["recall"] for r in per_run]
        out[name] = {**{key: float(np.mean([r[name][key] for r in per_run]))
                        for key in ("recall", "hit_rate", "ndcg", "coverage", "recall_seen_users", "recall_new_users")},
                     "recall_min": min(recalls), "recall_max": max(recalls), "prior": first["prior"]}
    return out


def _f(x: float) -> str:
    return "-" if x is None or np.isnan(x) else f"{x:.3f}"


def print_rows(out: dict[str, Any], strongest: str, strongest_recall: float) -> None:
    ours = out["streamrec"]
    tuned = out["ablation_tuned"]
    val = tuned["validation"]
    print(f"ablations (bench/retrieval_ablation.py), chosen on the validation split ({val['users']} users: served "
          f"{_f(val['recall_served'])}, with the chosen prior {_f(val['recall_with_prior'])}); the mean of "
          f"{ours['runs_done']} holdout runs, each over the same run's served lists:")
    if val.get("served_recall"):
        print("the service's prior on the validation split (best weight per half-life in days): " + "; ".join(
            f"{scale} " + ", ".join(f"{g['half_life_days']:g}d {_f(g['recall'])} (w {g['weight']:g}, "
                                    f"{g['candidates']})" for g in grid)
            for scale, grid in val["served_grid"].items()))
    print(f"{'row':<46}{'recall@10':>10}{'seen':>7}{'new':>7}{'min-max':>13}{'spread':>8}{'/strongest':>11}  prior")
    rows = [("streamrec (served)", {**ours, "prior": None}), *ours["ablations"].items()]
    served = ours.get("served_prior") or {}
    for name, m in rows:
        if not isinstance(m, dict):
            continue
        p = m["prior"]
        if p is not None and "scale" in p:
            what = (f"{p['scale']}, half-life {p['half_life_days']:g} days, w {p['weight']:g}, "
                    f"{p['candidates']} candidates")
        else:
            hl = "none" if p is None or p["half_life"] is None else round(p["half_life"], 4)
            what = "" if p is None else (f"half-life {hl}{' every record' if p['every'] else ''}, "
                                         f"w seen {p['weight_seen']}, w new {p['weight_new']}")
        if name == "streamrec (served)" and served:
            what = (f"served prior: {served.get('scale', 'logit')}, half-life {served['half_life_days']:g} days "
                    f"of event time, every record, w {served['weight']}, {served.get('candidates', 300)} "
                    f"candidates, for users with a history")
        print(f"{name:<46}{_f(m['recall']):>10}{_f(m['recall_seen_users']):>7}{_f(m['recall_new_users']):>7}"
              f"{_f(m['recall_min']):>7}-{_f(m['recall_max']):<5}"
              f"{100 * (m['recall_max'] - m['recall_min']) / m['recall']:>7.1f}%"
              f"{m['recall'] / strongest_recall:>10.2f}x  {what}")
    print(f"strongest baseline: {strongest} {_f(strongest_recall)}")
    print(f"predict AUC: served {_f(ours['predict_auc'])}, + item-rate log-odds x {tuned['predict_weight']} "
          f"{_f(ours['ablations']['predict_auc_with_item_rate'])}, item rate alone {_f(out['item_rate_auc'])}")
