"""Paired comparison of two arms of ``bench/retrieval.py`` on the same split (#11).

MovieLens scores 81 holdout users (21 seen in train), several with a single relevant item: one
hit more or less for one of them moves the mean recall@10 by 1/81 (0.012), the seen users' by
1/21 (0.048). Arm means alone cannot tell a real loss from that noise. Here each user's recall is
compared between the two arms run after run (run r of the arm against run r of the reference,
the same split and seed, the runs interleaved so that they share the machine's load), the
per-user differences averaged over the runs, and the mean difference given with a bootstrap
interval over users (the users are the sample that decides the figure; the run-to-run noise of
training is inside each user's averaged difference).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np

BOOTSTRAP = 2000
LEVEL = 0.95


def per_user_recall(lists: Mapping[int, Sequence[int]], truth: Mapping[int, set[int]], k: int) -> dict[str, float]:
    """user (as text, a JSON key) -> recall@k of their list; users of ``truth`` without a list score 0."""
    out: dict[str, float] = {}
    for user, relevant in truth.items():
        top = list(lists.get(user, ()))[:k]
        out[str(user)] = sum(1 for i in top if i in relevant) / len(relevant)
    return out


def paired_difference(arm_runs: Sequence[Mapping[str, float]], ref_runs: Sequence[Mapping[str, float]],
                      users: Iterable[int | str] | None = None, *, seed: int = 0) -> dict[str, float | int]:
    """The arm's mean recall minus the reference's over ``users`` (default: every user of the runs),
    runs paired by position (the shorter list decides how many), with a bootstrap interval over users.

    Returns {"runs", "users", "diff", "low", "high", "better", "worse"}: ``better``/``worse`` count the
    users whose averaged difference is above/below zero (the rest tie)."""
    pairs = min(len(arm_runs), len(ref_runs))
    if pairs == 0:
        raise ValueError("a paired comparison needs at least one run of each arm")
    keys = sorted(arm_runs[0]) if users is None else [str(u) for u in users]
    keys = [u for u in keys if all(u in r for r in (*arm_runs[:pairs], *ref_runs[:pairs]))]
    if not keys:
        return {"runs": pairs, "users": 0, "diff": float("nan"), "low": float("nan"), "high": float("nan"),
                "better": 0, "worse": 0}
    d = np.array([[arm_runs[r][u] - ref_runs[r][u] for u in keys] for r in range(pairs)]).mean(axis=0)
    rng = np.random.default_rng(seed)
    boot = d[rng.integers(0, d.shape[0], size=(BOOTSTRAP, d.shape[0]))].mean(axis=1)
    tail = (1.0 - LEVEL) / 2.0
    return {"runs": pairs, "users": len(keys), "diff": float(d.mean()), "low": float(np.quantile(boot, tail)),
            "high": float(np.quantile(boot, 1.0 - tail)), "better": int((d > 0).sum()), "worse": int((d < 0).sum())}
