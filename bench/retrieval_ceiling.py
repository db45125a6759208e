"""What planted's users allow, and whether streamrec's served user vectors leave any of it (#11).

#11 asks streamrec for half the oracle's recall@10 on the planted set. The oracle ranks by each
user's true vector at the holdout's time, which no learner has: a user is known only through the
positives they chose. This measures how far those positives go, with every user folded in
(bench/retrieval_foldin.py: the user's vector fit to the user's own train positives by the softmax
over the catalogue, every item vector fixed):

- **true items** (planted only): the generator's own item factors and popularity bias, so the one
  unknown is the user. No learner of the stream can do better for a user from the same positives
  than the best of these fits (up to the fold-in's linear logit: the generator's like term is
  left out). A user without a train positive gets the true popularity ranking.
- **served** (``--served``): one ``streamrec up`` run of bench/retrieval.py's default arm, the
  same replay; each holdout user's served scores (``/v1/recommend`` over the whole catalogue) and
  the served item vectors, then the fold-in from those scores as its prior centre. In the same run:
  the served ranking against the served ranking plus the fold-in.

Every fold-in is scored for each (positives kept, prior, recency half-life) of the grid, and the
best of the grid is printed: it is chosen on the holdout, so it flatters the fold-in, which is
what a ceiling should do.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Run as a script, bench/ comes first on sys.path and bench/tables.py would shadow the tables package.
_REPO = Path(__file__).resolve().parent.parent
sys.path[:] = [str(_REPO)] + [p for p in sys.path if Path(p or ".").resolve() != _REPO / "bench"]

import numpy as np  # noqa: E402

from bench.retrieval_data import DATASETS, Split, holdout_user_fields, load_dataset, oracle_lists, time_split  # noqa: E402
from bench.retrieval_foldin import fold_in, recency_weights  # noqa: E402
from bench.retrieval_metrics import cut_excluding, score_lists  # noqa: E402


@dataclass(frozen=True)
class Grid:
    lengths: tuple[int, ...]  # the user's last N train positives (0: every one)
    priors: tuple[float, ...]
    half_lives: tuple[float, ...]  # recency weights' half-life in positives (0: equal weights)

    def points(self) -> list[tuple[int, float, float]]:
        return list(itertools.product(self.lengths, self.priors, self.half_lives))


TRUE_GRID = Grid((20, 50, 0), (1.0, 3.0, 10.0), (0.0, 40.0))
SERVED_GRID = Grid((20, 50), (0.01, 0.03, 0.1), (0.0, 20.0))


@dataclass(frozen=True)
class Catalogue:
    """Raw item ids, each one's vector, and each holdout user's base scores over them."""

    items: np.ndarray  # int64[n]
    vectors: np.ndarray  # float64[n, d]
    base: dict[int, np.ndarray]  # holdout user -> float64[n]


def user_positives(split: Split, items: np.ndarray) -> dict[int, np.ndarray]:
    """Each train user's positives as catalogue rows, oldest first (items not in ``items`` dropped)."""
    row = {int(i): k for k, i in enumerate(items.tolist())}
    out: dict[int, list[int]] = {}
    train = split.train
    for u, i, y in zip(train.user.tolist(), train.item.tolist(), train.label.tolist(), strict=True):
        if y and i in row:
            out.setdefault(u, []).append(row[i])
    return {u: np.array(rows, np.int64) for u, rows in out.items()}


def folded_lists(cat: Catalogue, split: Split, positives: dict[int, np.ndarray], length: int, prior: float,
                 half_life: float, k: int = 10) -> dict[int, list[int]]:
    lists: dict[int, list[int]] = {}
    for user, base in cat.base.items():
        mine = positives.get(user, np.zeros(0, np.int64))
        if length:
            mine = mine[-length:]
        x = fold_in(base, cat.vectors, mine, recency_weights(mine.shape[0], half_life), prior=prior)
        scores = base + cat.vectors @ x
        seen = split.seen.get(user, ())
        lists[user] = cut_excluding(cat.items[np.argsort(-scores)[: k + len(seen)]].tolist(), seen, k)
    return lists


def sweep(cat: Catalogue, split: Split, grid: Grid) -> list[dict[str, Any]]:
    positives = user_positives(split, cat.items)
    rows = []
    for length, prior, half_life in grid.points():
        lists = folded_lists(cat, split, positives, length, prior, half_life)
        s = score_lists(lists, split.truth, catalogue=len(split.catalogue))
        rows.append({"positives": length or "all", "prior": prior, "half_life": half_life, "recall": s["recall"],
                     "hit_rate": s["hit_rate"], "ndcg": s["ndcg"]})
    return rows


def true_catalogue(log: Any, split: Split) -> Catalogue:
    if log.item_factors is None or log.item_bias is None or log.oracle_items is None:
        raise SystemExit(f"{log.name} has no true item factors: only planted has")
    base = np.asarray(log.item_bias, np.float64)
    return Catalogue(np.asarray(log.oracle_items, np.int64), np.asarray(log.item_factors, np.float64),
                     {u: base for u in split.truth})


def served_catalogue(log: Any, split: Split, *, timeout_s: float) -> tuple[Catalogue, dict[str, Any]]:
    """One `up` run of the default arm; the served item vectors and each holdout user's served scores."""
    from bench.retrieval_arms import DEFAULT_ARM, arm_config, base_config
    from bench.retrieval_up import ID_MASK, Api, UpRun
    from exports.bundle import list_versions, load_items, read_manifest

    config, why = arm_config(base_config(log), DEFAULT_ARM)
    if config is None:
        raise SystemExit(f"the default arm is not available: {why}")
    train_file = split.train.write_jsonl(Path(tempfile.mkdtemp(prefix="streamrec-ceiling-")) / "train.jsonl")
    run = UpRun("ceiling", config, train_file, len(split.train), timeout_s=timeout_s, stall_s=240.0)
    run.start()
    api = Api(run.port)
    try:
        pass_id, train_seconds = run.wait_trained()
        version = run.wait_served(api, pass_id)
        exports = run.run_dir / "exports"
        vectors: dict[int, np.ndarray] = {}
        for v in list_versions(exports):
            man = read_manifest(exports, v)
            if v > version or (got := load_items(exports, man)) is None:
                continue
            if man.items_full:
                vectors = {}
            vectors.update(zip(got[0].tolist(), got[1].astype(np.float64), strict=True))
        ids = np.array(sorted(vectors), np.uint64)
        matrix = np.stack([vectors[int(i)] for i in ids])
        row = {int(i): r for r, i in enumerate(ids.tolist())}
        base: dict[int, np.ndarray] = {}
        unfit = 0
        for user in sorted(split.truth):
            status, answer = api.call("POST", "/v1/recommend", {"user": holdout_user_fields(split, user),
                                                                "k": min(len(ids), 1000)})
            if status != 200:
                raise RuntimeError(f"recommend {user}: {status} {answer}")
            rows = [row[int(it["id"])] for it in answer["items"]]
            scores = np.array([float(it["score"]) for it in answer["items"]])
            # the served scores are <u, v>: u is their least-squares solution over the items returned
            u, *_ = np.linalg.lstsq(matrix[rows], scores, rcond=None)
            if np.abs(matrix[rows] @ u - scores).max() > 1e-3 * max(1.0, np.abs(scores).max()):
                unfit += 1  # not a tower's answer (a cold user's popular items): fold in from its order
                full = np.full(len(ids), scores.min() - 1.0)
                full[rows] = scores
                base[user] = full
                continue
            base[user] = matrix @ u
    finally:
        api.close()
        run.stop()
    items = (ids & np.uint64(ID_MASK)).astype(np.int64)
    return Catalogue(items, matrix, base), {"train_seconds": train_seconds, "served_version": version,
                                             "users_not_from_the_tower": unfit, "log": str(run.log)}


def _best(rows: list[dict[str, Any]], length: int | str | None = None) -> dict[str, Any]:
    pick = [r for r in rows if length is None or r["positives"] == length]
    return max(pick, key=lambda r: r["recall"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", choices=DATASETS, default="planted", help="true items: planted only")
    ap.add_argument("--events", type=int, default=200_000, help="planted events")
    ap.add_argument("--served", action="store_true", help="also run the default arm through `up` and fold in there")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds for the served run's replay")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    started = time.time()
    log = load_dataset(args.dataset, events=args.events)
    split = time_split(log)
    out: dict[str, Any] = {"dataset": args.dataset, "events": len(log), "holdout_users": len(split.truth)}
    oracle = None
    if log.oracle is not None:
        oracle = score_lists(oracle_lists(log, split), split.truth, catalogue=len(split.catalogue))["recall"]
        out["oracle_recall"] = oracle
        cat = true_catalogue(log, split)
        popular = score_lists(folded_lists(cat, split, {}, 0, 1.0, 0.0), split.truth,
                              catalogue=len(split.catalogue))["recall"]
        out["true_popularity_recall"] = popular
        out["true_items"] = sweep(cat, split, TRUE_GRID)
    if args.served:
        cat, run = served_catalogue(log, split, timeout_s=args.timeout)
        served = score_lists(folded_lists(cat, split, {}, 0, 1.0, 0.0), split.truth,
                             catalogue=len(split.catalogue))["recall"]
        out["served"] = {"run": run, "served_recall": served, "folded": sweep(cat, split, SERVED_GRID)}
    out["seconds"] = time.time() - started
    if args.json:
        print(json.dumps(out))
        return 0
    of = (lambda r: f"  {r / oracle:.2f} of the oracle") if oracle else (lambda r: "")
    print(f"== {args.dataset}: {len(log)} events, {len(split.truth)} holdout users with a positive")
    if oracle is not None:
        print(f"oracle (true user and item vectors at the holdout's time)   recall@10 {oracle:.4f}")
        popular = out["true_popularity_recall"]
        print(f"true popularity alone                                        recall@10 {popular:.4f}{of(popular)}")
        for length in TRUE_GRID.lengths:
            b = _best(out["true_items"], length or "all")
            print(f"true items, user folded in from its last {length or 'all'!s:>3} positives      recall@10 "
                  f"{b['recall']:.4f}{of(b['recall'])}  (best of the grid: prior {b['prior']:g}, "
                  f"half-life {b['half_life']:g})")
    if args.served:
        s = out["served"]
        print(f"streamrec served (default arm, one `up` run)                 recall@10 {s['served_recall']:.4f}"
              f"{of(s['served_recall'])}")
        for length in SERVED_GRID.lengths:
            b = _best(s["folded"], length)
            print(f"served + user folded in from its last {length:>3} positives        recall@10 {b['recall']:.4f}"
                  f"{of(b['recall'])}  ({b['recall'] / s['served_recall']:.3f}x served; prior {b['prior']:g}, "
                  f"half-life {b['half_life']:g})")
        if s["run"]["users_not_from_the_tower"]:
            print(f"({s['run']['users_not_from_the_tower']} users answered by popularity, not the tower)")
    print(f"({out['seconds']:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
