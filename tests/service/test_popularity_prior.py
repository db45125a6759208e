"""/v1/recommend's popularity prior (service.popularity_prior): a user with a history gets the index's top
candidates (less the exclusions) re-ranked by the standardized score + weight x the standardized log1p(the bundle's
decayed count), or on the logit scale by score + temperature * weight * log1p(count); a user without one, a weight
of 0 (configured or asked) or a bundle without counts, the model's ranking. Under weight ``auto`` the weight is the
one the bundle carries (the job's choice), a bundle without one is served the fallback weight."""

from __future__ import annotations

import statistics
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

from logrecords.schema_config import HistoryConfig, SchemaConfig, SlotConfig, SlotKind
from service.settings import PopularityPriorSettings

from .service_support import ITEM_IDS, USER_IDS, BundleBuilder, make_settings, started

TEMPERATURE = 0.05
WEIGHT = 2.0
MODEL = {"type": "two_tower", "slots": [{"name": "user", "dim": 8, "tower": "user"},
                                        {"name": "history", "dim": 8, "tower": "user", "pooling": "mean"},
                                        {"name": "item", "dim": 8, "tower": "item"}],
         "n_dense": 0, "mlp": [8], "tower_dim": 8, "seed": 4, "retrieval": {"temperature": TEMPERATURE}}
SCHEMA = SchemaConfig(slots=(SlotConfig(name="user", kind=SlotKind.SPARSE, slot_id=1),
                             SlotConfig(name="item", kind=SlotKind.SPARSE, slot_id=2)),
                      user_id="user", item_id="item", history=HistoryConfig(length=5))
ITEMS = ITEM_IDS[:50]
COUNTED = ITEMS[::2]  # half the items have a count: 0 .. 500 records' worth, some far above the others
COUNTS = np.random.default_rng(5).exponential(20.0, COUNTED.shape[0]) ** 1.5


def _bundle(root: Path, counts: bool = True, chosen: dict | None = None) -> BundleBuilder:
    b = BundleBuilder(root, model=MODEL, schema=SCHEMA.model_dump(mode="json"))
    b.push("user", USER_IDS[:5])
    b.push("history", ITEMS)
    vecs = np.random.default_rng(6).standard_normal((ITEMS.shape[0], 8)).astype(np.float32)
    order = np.argsort(COUNTED)
    b.export("base", items=(ITEMS, vecs),
             popularity=(COUNTED[order], COUNTS[order], 1.7e9) if counts else None, popularity_weight=chosen)
    return b


def _user(history: list[int]) -> dict:
    return {"slots": {"user": [int(USER_IDS[1])], "history": history}}


def _ask(client: TestClient, history: list[int], k: int = 10, **extra: object) -> list[tuple[int, float]]:
    r = client.post("/v1/recommend", json={"user": _user(history), "k": k, **extra})
    assert r.status_code == 200, r.text
    return [(x["id"], x["score"]) for x in r.json()["items"]]


def _prior_scores(model: list[tuple[int, float]], scale: str) -> list[tuple[int, float]]:
    """Each candidate's re-ranking score, computed here one by one from the test's own counts."""
    count = dict(zip(COUNTED.tolist(), COUNTS.tolist(), strict=True))
    logc = [float(np.log1p(count.get(i, 0.0))) for i, _ in model]
    if scale == "logit":
        return [(i, s + TEMPERATURE * WEIGHT * c) for (i, s), c in zip(model, logc, strict=True)]
    scores = [s for _, s in model]

    def z(xs: list[float], x: float) -> float:
        sd = statistics.pstdev(xs)
        return 0.0 if sd == 0 else (x - statistics.fmean(xs)) / sd

    return [(i, z(scores, s) + WEIGHT * z(logc, c)) for (i, s), c in zip(model, logc, strict=True)]


def _reranked(model: list[tuple[int, float]], scale: str, exclude: tuple[int, ...] = (),
              candidates: int = 30) -> list[tuple[int, float]]:
    """The model's first ``candidates`` items besides ``exclude``, by the prior."""
    kept = [(i, s) for i, s in model if i not in exclude][:candidates]
    return sorted(_prior_scores(kept, scale), key=lambda x: -x[1])


@pytest.fixture(params=["standardized", "logit"])
def client(tmp_path: Path, request: pytest.FixtureRequest):
    _bundle(tmp_path / "exports")
    settings = PopularityPriorSettings(scale=request.param, weight=WEIGHT, candidates=30)
    with started(make_settings(tmp_path / "exports", popularity_prior=settings)) as c:
        c.scale = request.param
        yield c


def test_a_user_with_a_history_gets_the_candidates_reranked_by_the_counts(client: TestClient) -> None:
    history = [int(ITEMS[1]), int(ITEMS[2])]
    model = _ask(client, history, k=50, popularity_weight=0.0)  # every item, the model's ranking
    assert [s for _, s in model] == sorted((s for _, s in model), reverse=True)
    got = _ask(client, history)
    want = _reranked(model, client.scale)  # the index's top 30 candidates, re-ranked
    assert [i for i, _ in got] == [i for i, _ in want[:10]]
    assert [i for i, _ in want[:10]] != [i for i, _ in model[:10]]  # the prior moved something
    np.testing.assert_allclose([s for _, s in got], [s for _, s in want[:10]], rtol=1e-5, atol=1e-5)
    # exclusions leave the rest of the re-ranked list, and the prior still re-ranks 30 candidates besides them
    skip = tuple(i for i, _ in want[:3]) + tuple(i for i, _ in model[-5:])
    got = _ask(client, history, k=5, exclude=list(skip))
    assert [i for i, _ in got] == [i for i, _ in _reranked(model, client.scale, skip)[:5]]


def test_the_standardized_prior_ignores_the_scale_of_the_scores() -> None:
    from service.popularity_prior import ItemCounts, rerank

    rng = np.random.default_rng(3)
    ids = np.arange(1, 201, dtype=np.uint64)
    scores = rng.standard_normal(200).astype(np.float32)
    counts = ItemCounts(ids, np.log1p(rng.exponential(30.0, 200)).astype(np.float32), 0.0)
    base, _ = rerank(ids, scores, counts, 0.7, TEMPERATURE)
    for a, b in ((10.0, 3.0), (0.1, -2.0)):  # a run whose logits came out 10x wider or 10x narrower, and shifted
        again, _ = rerank(ids, (a * scores + b).astype(np.float32), counts, 0.7, TEMPERATURE)
        assert again.tolist() == base.tolist()
    logit_base, _ = rerank(ids, scores, counts, 2.0, TEMPERATURE, "logit")
    logit_wide, _ = rerank(ids, 10.0 * scores, counts, 2.0, TEMPERATURE, "logit")
    assert logit_wide.tolist() != logit_base.tolist()  # the logit scale's weight means less on wider logits


def test_a_constant_term_ranks_nothing() -> None:
    from exports.popularity_rerank import standardized
    from service.popularity_prior import ItemCounts, rerank

    ids = np.array([5, 3, 9], np.uint64)
    assert standardized(np.full(3, 2.5)).tolist() == [0.0, 0.0, 0.0]
    assert standardized(np.zeros(0)).shape == (0,)
    no_counts = ItemCounts(np.empty(0, np.uint64), np.empty(0, np.float32), 0.0)
    got, _ = rerank(ids, np.array([0.3, 0.2, 0.1], np.float32), no_counts, 5.0, TEMPERATURE)
    assert got.tolist() == [5, 3, 9]  # no item has a count: the model's order
    equal = ItemCounts(np.sort(ids), np.full(3, 1.0, np.float32), 0.0)
    assert rerank(ids, np.full(3, 0.4, np.float32), equal, 5.0, TEMPERATURE)[0].tolist() == [5, 3, 9]  # ties: search's


def test_a_user_without_a_history_or_a_weight_of_0_gets_the_models_ranking(client: TestClient) -> None:
    model = _ask(client, [int(ITEMS[1])], k=50, popularity_weight=0.0)
    assert _ask(client, [int(ITEMS[1])], popularity_weight=0.0) == model[:10]
    no_history = _ask(client, [], k=50, popularity_weight=0.0)
    assert _ask(client, []) == no_history[:10]


def test_weight_0_or_a_bundle_without_counts_serves_the_models_ranking(tmp_path: Path) -> None:
    _bundle(tmp_path / "a")
    _bundle(tmp_path / "b", counts=False)
    with started(make_settings(tmp_path / "a", popularity_prior=PopularityPriorSettings(weight=0.0))) as c:
        off = _ask(c, [int(ITEMS[1])])
        assert off == _ask(c, [int(ITEMS[1])], popularity_weight=0.0)
    with started(make_settings(tmp_path / "b", popularity_prior=PopularityPriorSettings(weight=WEIGHT))) as c:
        assert _ask(c, [int(ITEMS[1])]) == off


@pytest.mark.parametrize("weight", ["-1.0", "1e9", "Infinity", "NaN", '"x"'])
def test_a_weight_that_is_not_a_finite_non_negative_number_is_refused(client: TestClient, weight: str) -> None:
    body = f'{{"user": {{"slots": {{"user": [{int(USER_IDS[1])}]}}}}, "k": 5, "popularity_weight": {weight}}}'
    r = client.post("/v1/recommend", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 422, r.text
    assert "popularity_weight" in r.text


def test_the_settings_refuse_a_weight_that_is_not_finite_or_an_unknown_scale() -> None:
    with pytest.raises(ValueError, match="weight"):
        PopularityPriorSettings(weight=float("inf"))
    with pytest.raises(ValueError, match="scale"):
        PopularityPriorSettings(scale="rank")


def _chosen(weight: object, scale: object = "standardized") -> dict:
    return {"weight": weight, "scale": scale, "users": 40, "candidates": 30, "k": 10, "hit_rates": {}}


def test_auto_serves_the_weight_the_bundle_carries_and_a_number_in_the_yaml_overrides_it(tmp_path: Path) -> None:
    _bundle(tmp_path / "e", chosen=_chosen(0.5))
    history = [int(ITEMS[1])]
    auto = PopularityPriorSettings(weight="auto", candidates=30)
    with started(make_settings(tmp_path / "e", popularity_prior=auto)) as c:
        served = _ask(c, history, k=20)
        assert served == _ask(c, history, k=20, popularity_weight=0.5)
        assert served != _ask(c, history, k=20, popularity_weight=6.0)
    fixed = PopularityPriorSettings(weight=6.0, candidates=30)
    with started(make_settings(tmp_path / "e", popularity_prior=fixed)) as c:
        assert _ask(c, history, k=20) == _ask(c, history, k=20, popularity_weight=6.0)


def test_a_bundle_without_a_chosen_weight_is_served_the_fallback_under_auto(tmp_path: Path) -> None:
    from exports.popularity_rerank import AUTO_FALLBACK_WEIGHT

    _bundle(tmp_path / "e")  # written before bundles carried a chosen weight
    history = [int(ITEMS[1])]
    auto = PopularityPriorSettings(weight="auto", candidates=30)
    with started(make_settings(tmp_path / "e", popularity_prior=auto)) as c:
        assert _ask(c, history, k=20) == _ask(c, history, k=20, popularity_weight=AUTO_FALLBACK_WEIGHT)


@pytest.mark.parametrize("chosen", [_chosen(-1.0), _chosen(2e6), _chosen("3"), _chosen(True), _chosen(None),
                                    _chosen(1.0, scale="logit"), {"scale": "standardized"}])
def test_a_bundle_whose_chosen_weight_is_malformed_is_refused(tmp_path: Path, chosen: dict) -> None:
    from core.errors import CorruptData
    from exports.bundle import read_manifest
    from service.popularity_prior import item_counts

    _bundle(tmp_path / "e", chosen=chosen)
    with pytest.raises(CorruptData, match="popularity_weight"):
        item_counts(tmp_path / "e", read_manifest(tmp_path / "e", 1))


def test_the_settings_refuse_an_unknown_weight_and_auto_on_the_logit_scale() -> None:
    with pytest.raises(ValueError, match="weight"):
        PopularityPriorSettings(weight="automatic")
    with pytest.raises(ValueError, match="auto is chosen for the standardized scale"):
        PopularityPriorSettings(weight="auto", scale="logit")
    assert PopularityPriorSettings(weight=0.0, scale="logit").weight == 0.0
    with pytest.raises(ValueError, match="a number as the weight"):  # the default weight is auto
        PopularityPriorSettings(scale="logit")
    assert PopularityPriorSettings().weight == "auto" and PopularityPriorSettings(weight=3.0).weight == 3.0
