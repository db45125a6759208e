"""/v1/recommend's popularity prior (service.popularity_prior): a user with a history gets the index's
candidates re-ranked by score + temperature * weight * log1p(the bundle's decayed count); a user without
one, a weight of 0 (configured or asked) or a bundle without counts, the model's ranking."""

from __future__ import annotations

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


def _bundle(root: Path, counts: bool = True) -> BundleBuilder:
    b = BundleBuilder(root, model=MODEL, schema=SCHEMA.model_dump(mode="json"))
    b.push("user", USER_IDS[:5])
    b.push("history", ITEMS)
    vecs = np.random.default_rng(6).standard_normal((ITEMS.shape[0], 8)).astype(np.float32)
    order = np.argsort(COUNTED)
    b.export("base", items=(ITEMS, vecs),
             popularity=(COUNTED[order], COUNTS[order], 1.7e9) if counts else None)
    return b


def _user(history: list[int]) -> dict:
    return {"slots": {"user": [int(USER_IDS[1])], "history": history}}


def _ask(client: TestClient, history: list[int], k: int = 10, **extra: object) -> list[tuple[int, float]]:
    r = client.post("/v1/recommend", json={"user": _user(history), "k": k, **extra})
    assert r.status_code == 200, r.text
    return [(x["id"], x["score"]) for x in r.json()["items"]]


def _reranked(model: list[tuple[int, float]], exclude: tuple[int, ...] = ()) -> list[int]:
    """The model's candidates by the prior, computed here from the test's own counts."""
    count = dict(zip(COUNTED.tolist(), COUNTS.tolist(), strict=True))
    kept = [(i, s + TEMPERATURE * WEIGHT * np.log1p(count.get(i, 0.0))) for i, s in model if i not in exclude]
    return [i for i, _ in sorted(kept, key=lambda x: -x[1])]


@pytest.fixture
def client(tmp_path: Path):
    _bundle(tmp_path / "exports")
    with started(make_settings(tmp_path / "exports",
                               popularity_prior=PopularityPriorSettings(weight=WEIGHT, candidates=30))) as c:
        yield c


def test_a_user_with_a_history_gets_the_candidates_reranked_by_the_counts(client: TestClient) -> None:
    history = [int(ITEMS[1]), int(ITEMS[2])]
    model = _ask(client, history, k=50, popularity_weight=0.0)  # every item, the model's ranking
    assert [s for _, s in model] == sorted((s for _, s in model), reverse=True)
    got = _ask(client, history)
    want = _reranked(model[:30])  # the index's top 30 candidates, re-ranked
    assert [i for i, _ in got] == want[:10]
    assert want[:10] != [i for i, _ in model[:10]]  # the prior moved something
    count = dict(zip(COUNTED.tolist(), COUNTS.tolist(), strict=True))
    scores = dict(model)
    np.testing.assert_allclose([s for _, s in got], [scores[i] + TEMPERATURE * WEIGHT * np.log1p(count.get(i, 0.0))
                                                     for i, _ in got], rtol=1e-5, atol=1e-5)
    skip = tuple(want[:3])  # exclusions leave the rest of the re-ranked list
    assert [i for i, _ in _ask(client, history, k=5, exclude=list(skip))] == _reranked(model[:30], skip)[:5]


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


def test_the_settings_refuse_a_weight_that_is_not_finite() -> None:
    with pytest.raises(ValueError, match="weight"):
        PopularityPriorSettings(weight=float("inf"))
