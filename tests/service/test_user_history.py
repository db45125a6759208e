"""The served user history: /v1/recommend for a known user uses the history the trainers
keep, read live from the shards (or, without read-through, from the bundle), exactly as if the
client had sent it; a client-sent history is served as sent."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from exports.item_catalog import ItemCatalog
from models import build_model
from models.model_config import ModelConfig
from models.two_tower import as_two_tower
from trainer.export import Exporter
from trainer.history_join import HistoryJoin

from ..ps.ps_harness import shard_processes
from .service_support import HISTORY_SCHEMA, make_settings, picks, started

pytestmark = pytest.mark.process

USER, ITEM = np.uint64(0 << 56), np.uint64(1 << 56)
MODEL = {"type": "two_tower", "slots": [{"name": "user", "tower": "user"},
                                        {"name": "history", "tower": "user", "pooling": "mean"},
                                        {"name": "item", "tower": "item"}],
         "embedding_dim": 8, "mlp": [16], "tower_dim": 8, "seed": 5, "n_dense": 0}
SCHEMA = HISTORY_SCHEMA


@pytest.mark.parametrize("user_slot", [True, False], ids=["user-id-in-the-tower", "history-alone"])
def test_recommend_reads_the_users_history_live_and_from_the_bundle(tmp_path: Path, user_slot: bool) -> None:
    """Also for a user tower without the user id's rows (behaviour alone, as YouTube's DNN): the
    request's user id still keys the history."""
    slots = [s for s in MODEL["slots"] if user_slot or s["name"] != "user"]
    model = ModelConfig.model_validate({**MODEL, "slots": slots})
    tables = [t.model_dump(mode="json") for t in model.table_configs()]
    users = np.arange(1, 4, dtype=np.uint64) | USER
    items = np.arange(1, 41, dtype=np.uint64) | ITEM
    rng = np.random.default_rng(0)
    with shard_processes(tmp_path, tables) as shards, shards.client() as c:
        slots = tuple(s.name for s in as_two_tower(build_model(model)).item_slots)
        ItemCatalog(slots, client=c).observe(picks(np.repeat(users[:1], 40), items, 0.0))
        join = HistoryJoin(SCHEMA, shards.client())
        join.join(picks(users[:2].repeat(4), rng.choice(items, 8), 100.0))  # users 1 and 2: 4 items each
        exporter = Exporter(str(tmp_path / "exports"), shards.client(), model, base_every=10, schema=SCHEMA)
        exporter.export(1, build_model(model).params.as_dict(), None, ItemCatalog(slots))
        exporter.close()
        exported = _newest_first(c.wait(c.read_id_rows("ids.history", users[:1], words=11)).rows)
        late = rng.choice(items, 2)
        join.join(picks(users[:1].repeat(2), late, 200.0))  # after the bundle: only the live path has these
        stored = {int(u): c.wait(c.read_id_rows("ids.history", np.array([u]), words=11)).rows for u in users}
        join.close()
        endpoints = [f"tcp://127.0.0.1:{p}" for p in shards.ports]

        def recommend(client, user, history=None):
            record = {"slots": {"user": [int(user)]} | ({} if history is None else {"history": history})}
            r = client.post("/v1/recommend", json={"user": record, "k": 10})
            assert r.status_code == 200, r.text
            return [x["id"] for x in r.json()["items"]], [x["score"] for x in r.json()["items"]]

        def predict(client, instances):
            r = client.post("/v1/predict", json={"instances": instances})
            assert r.status_code == 200, r.text
            return r.json()["scores"]

        live_history = {int(u): _newest_first(stored[int(u)]) for u in users}
        assert len(live_history[int(users[0])]) == 5 and live_history[int(users[0])][:2] == late[::-1].tolist()
        settings = make_settings(tmp_path / "exports", read_through={"endpoints": endpoints, "timeout_s": 5.0,
                                                                   "live_items": False})
        with started(settings) as client:
            for u in users:
                assert recommend(client, u) == recommend(client, u, live_history[int(u)]), int(u)
            if not user_slot:  # the history is all the tower knows of a user: different histories, different lists
                assert recommend(client, users[0]) != recommend(client, users[1])
            # /v1/predict: each instance's user's history, read once per user of the batch, unless it sent one
            item = int(items[5])
            batch = [{"slots": {"user": [int(u)], "item": [item]}} for u in (*users, users[0])]
            batch.append({"slots": {"user": [int(users[0])], "item": [item], "history": [int(items[0])]}})
            explicit = [{"slots": {"user": [int(u)], "item": [item], "history": live_history[int(u)]}}
                        for u in (*users, users[0])]
            scores = predict(client, batch)
            assert scores[:4] == predict(client, explicit)
            assert scores[4] == predict(client, [batch[4]])[0] != scores[0]  # its own, as sent
            if not user_slot:
                assert scores[0] != scores[1]
            sent = [int(items[0])]  # (an empty list counts as not sent)
            assert recommend(client, users[0], sent) != recommend(client, users[0])  # a sent history is served
    assert len(exported) == 4
    with started(make_settings(tmp_path / "exports")) as client:  # no read-through: the bundle's history
        assert recommend(client, users[0]) == recommend(client, users[0], exported)  # (its pass predates late)


def _newest_first(row: np.ndarray) -> list[int]:
    from tables.id_rows_kernels import ring_unroll
    ids, _, lengths = ring_unroll(row)
    return ids[0, : lengths[0]].tolist()
