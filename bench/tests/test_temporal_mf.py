"""The batch baseline bench.temporal_mf: its gradient against finite differences, and that its
time trend follows a user whose taste moves (what it is there to measure)."""

from __future__ import annotations

import numpy as np

from bench.temporal_mf import Params, TemporalMFSpec, fit, loss_and_grads, user_vectors


def _params(rng: np.random.Generator, users: int, items: int, dim: int) -> Params:
    return Params(a=rng.normal(size=(users, dim)), b=rng.normal(size=(users, dim)), v=rng.normal(size=(items, dim)),
                  c=rng.normal(size=items))


def test_gradient_matches_finite_differences() -> None:
    rng = np.random.default_rng(0)
    p = _params(rng, 5, 7, 3)
    users, items = np.array([0, 2, 2, 4]), np.array([1, 6, 1, 3])
    t = rng.random(4)
    _, grads = loss_and_grads(p, users, items, t, l2=0.3)
    eps = 1e-6
    for name, x in p.arrays().items():
        numeric = np.zeros_like(x)
        for idx in np.ndindex(x.shape):
            keep = x[idx]
            x[idx] = keep + eps
            up, _ = loss_and_grads(p, users, items, t, l2=0.3)
            x[idx] = keep - eps
            down, _ = loss_and_grads(p, users, items, t, l2=0.3)
            x[idx] = keep
            numeric[idx] = (up - down) / (2 * eps)
        np.testing.assert_allclose(grads[name], numeric, rtol=1e-5, atol=1e-7, err_msg=name)


def test_the_time_trend_follows_a_user_whose_taste_moves() -> None:
    """One user likes items 0-4 early and 5-9 late, others like all ten: at t = 1 the fit ranks
    the late items first, at t = 0 the early ones."""
    rng = np.random.default_rng(1)
    early = rng.integers(0, 5, 400)
    late = rng.integers(5, 10, 400)
    others = rng.integers(0, 10, 800)
    users = np.concatenate([np.zeros(800, np.int64), 1 + rng.integers(0, 4, 800)])
    items = np.concatenate([early, late, others])
    t = np.concatenate([rng.random(400) * 0.4, 0.6 + rng.random(400) * 0.4, rng.random(800)])
    p = fit(users, items, t, 5, 10, TemporalMFSpec(dim=4, epochs=20, lr=0.05, seed=0))
    at = {when: user_vectors(p, np.array([0]), np.array([when], np.float32)) @ p.v.T + p.c for when in (0.0, 1.0)}
    assert set(np.argsort(-at[1.0][0])[:5].tolist()) == {5, 6, 7, 8, 9}
    assert set(np.argsort(-at[0.0][0])[:5].tolist()) == {0, 1, 2, 3, 4}


def test_a_static_fit_keeps_no_trend() -> None:
    rng = np.random.default_rng(2)
    users, items, t = rng.integers(0, 4, 300), rng.integers(0, 6, 300), np.sort(rng.random(300))
    static = fit(users, items, t, 4, 6, TemporalMFSpec(dim=3, epochs=2, batch=50, trend=False))
    assert not static.b.any() and static.a.any()
