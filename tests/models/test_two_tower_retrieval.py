"""The two-tower retrieval loss: its gradients against a slow reference, in every option."""

from __future__ import annotations

import math

import numpy as np
import pytest

from models import build_model
from models.features import build_features
from models.layers import bce_with_logits
from models.model_config import ITEM_BIAS_TABLE
from models.two_tower import TwoTower, TwoTowerFeatures
from tests.models.helpers import random_batch, small_config

CASES = {
    "both, normalised, logQ, sampled": {"loss": "both", "pointwise_weight": 0.5, "temperature": 0.2,
                                         "normalize": True, "logq": True, "negatives": 4},
    "softmax, normalised, logQ, sampled": {"loss": "softmax", "temperature": 0.1, "normalize": True,
                                           "logq": True, "negatives": 3},
    "softmax, raw dot, no logQ, in-batch": {"loss": "softmax", "temperature": 2.0, "normalize": False,
                                            "logq": False, "negatives": 0},
    "softmax, item biases, logQ, sampled": {"loss": "softmax", "temperature": 0.5, "normalize": False,
                                            "logq": True, "negatives": 3, "item_bias": {"kind": "adagrad"}},
    "both, normalised, item biases, in-batch": {"loss": "both", "temperature": 0.3, "normalize": True,
                                                "logq": False, "negatives": 0, "item_bias": {"kind": "sgd"}},
    "softmax, label-0 records at 0.4, logQ, sampled": {"loss": "softmax", "temperature": 0.5, "normalize": False,
                                                       "logq": True, "negatives": 3, "label0_weight": 0.4},
}


def _reference(model: TwoTower, f: TwoTowerFeatures, rows: dict[str, np.ndarray]) -> tuple[float, float]:
    """(mean click loss, mean softmax loss) with loops in float64: what backward must differentiate."""
    r = model.config.retrieval
    u = model.user_vectors(f, rows).astype(np.float64)
    v = model.item_vectors(f.items, rows).astype(np.float64)
    bias = np.zeros(f.items.n)  # each candidate's bias: its item-tower ids' rows in the bias table
    if r.item_bias is not None:
        u, v = u[:, :-1], v[:, :-1]  # the served columns [1] and [temperature * b]: not the towers'
        ti = f.items.tables[ITEM_BIAS_TABLE]
        for s in range(len(ti.slots)):
            for j in range(f.items.n):
                ids = ti.idx[ti.offs[s, j]:ti.offs[s, j + 1]]
                bias[j] += sum(float(rows[ITEM_BIAS_TABLE][k, 0]) for k in ids)
    scale = 1.0 / r.temperature if r.normalize else 1.0
    a, b = float(model.params.value["score.a"][0]), float(model.params.value["score.b"][0])
    wide = np.zeros(f.n)  # the wide weights (row column 0) of every id of the record, user and item slots
    for feats, tower in ((f, model.user_slots), (f.items, model.item_slots)):
        for t, ti in feats.tables.items():
            if t == ITEM_BIAS_TABLE:
                continue  # the softmax's, not the click's
            for s in range(len(ti.slots)):
                if ti.slots[s] not in tower:
                    continue
                for i in range(f.n):
                    wide[i] += sum(float(rows[t][ti.idx[j], 0]) for j in range(ti.offs[s, i], ti.offs[s, i + 1]))
    click = 0.0
    for i in range(f.n):
        z = a * scale * float(u[i] @ v[i]) + wide[i] + b
        click += max(z, 0.0) - z * f.labels[i] + math.log1p(math.exp(-abs(z)))
    # the softmax's rows: the positives at weight 1, the label-0 records at label0_weight (when it is not 0)
    pos = [i for i in range(f.n) if f.labels[i] > 0.5 or r.label0_weight > 0]
    weight = [1.0 if f.labels[i] > 0.5 else r.label0_weight for i in pos]
    cols = pos + [f.n + k for k in range(f.n_sampled)]
    logq = np.zeros(len(cols))
    if r.logq:
        q = model.frequency.expected_count(f.item_hash[cols]).astype(np.float64)
        logq = np.log(q + (f.n_sampled / f.pool_size if f.n_sampled else 0.0))
    soft = 0.0
    for row, i in enumerate(pos):
        logits = []
        for c, j in enumerate(cols):
            if c != row and f.item_hash[j] == f.item_hash[i]:
                continue  # the row's own item again: not a negative
            s = float(u[i] @ v[j]) / r.temperature + bias[j] - logq[c]
            logits.append((s, c == row))
        top = max(s for s, _ in logits)
        lse = top + math.log(sum(math.exp(s - top) for s, _ in logits))
        soft += weight[row] * (lse - next(s for s, own in logits if own))
    return click / f.n, soft / sum(weight)


@pytest.mark.parametrize("case", list(CASES))
def test_softmax_loss_gradients_match_a_slow_reference(case: str) -> None:
    options = CASES[case]
    model = build_model(small_config("two_tower", retrieval={**options, "catalogue_size": 8}))
    assert isinstance(model, TwoTower)
    rng = np.random.default_rng(8)

    def rows_for(f):
        return {t: rng.normal(0, 0.5, (ti.keys.shape[0], model.row_width[t])).astype(np.float32)
                for t, ti in f.tables.items()}

    warm = random_batch(10, seed=5, vocab=40)  # a first step: the pool of negatives and the frequencies fill
    f0 = model.features(warm)
    model.forward(f0, rows_for(f0))
    model.backward(bce_with_logits(model.forward(f0, rows_for(f0)), f0.labels)[2])

    batch = random_batch(12, seed=1)
    batch.labels[:] = 0.0
    batch.labels[[0, 2, 3, 5, 8, 9, 11]] = 1.0
    for name in ("c", "d"):  # record 3 holds record 0's item: the same item twice among the positives
        values, offsets = batch.slots[name]
        own = values[offsets[0]:offsets[1]]
        keep = np.concatenate([values[:offsets[3]], own, values[offsets[4]:]])
        new_offsets = offsets.copy()
        new_offsets[4:] += own.shape[0] - (offsets[4] - offsets[3])
        batch.slots[name] = (keep, new_offsets)
    f = model.features(batch)
    assert f.n_sampled == options["negatives"]
    assert f.item_hash[0] == f.item_hash[3] and len(set(f.item_hash[:f.n].tolist())) == f.n - 1
    rows = rows_for(f)
    model.params.values[...] += rng.normal(0, 0.05, model.params.values.shape).astype(np.float32)
    _, _, dlogits = bce_with_logits(model.forward(f, rows), f.labels)
    sparse = model.backward(dlogits)
    dense = model.params.grads.copy()
    click_weight = {"pointwise": 1.0, "softmax": 0.0, "both": options.get("pointwise_weight", 1.0)}[options["loss"]]
    names = list(model.params.shapes)
    head_at = sum(int(np.prod(model.params.shapes[n])) for n in names[: names.index("score.a")])
    head = range(head_at, model.params.values.size)  # the click head (a, b): it learns from the click loss alone
    eps = 1e-4  # a ReLU kink sits 2-3e-4 from one of the picked weights: larger steps straddle it

    def numeric(arr: np.ndarray, i: int, tower: bool) -> float:
        old = arr.flat[i]
        out = []
        for x in (old + eps, old - eps):
            arr.flat[i] = x
            click, soft = _reference(model, f, rows)
            out.append(soft + click_weight * click if tower else click)
        arr.flat[i] = old
        return (out[0] - out[1]) / (2 * eps)

    picks = [*head, *rng.choice(head_at, 30, replace=False).tolist()]
    want = np.array([numeric(model.params.values, int(i), tower=int(i) not in head) for i in picks])
    np.testing.assert_allclose(dense[picks], want, rtol=3e-2, atol=2e-3)
    for t, g in sparse.items():
        # column 0, the wide weight, is in the click alone; the embedding in the softmax too; the item bias
        # (its table's only column) in the softmax alone
        want = np.array([numeric(rows[t], i, tower=t == ITEM_BIAS_TABLE or i % g.shape[1] != 0)
                         for i in range(g.size)]).reshape(g.shape)
        np.testing.assert_allclose(g, want, rtol=3e-2, atol=2e-3, err_msg=f"table {t}")
        assert np.abs(g).sum() > 0
    if options["negatives"]:  # keys only the sampled negatives hold were appended, pulled and get gradients
        plain = build_features(model.config, batch)
        extra = {t: f.tables[t].keys.shape[0] - plain.tables[t].keys.shape[0] for t in f.tables}
        assert sum(extra.values()) > 0
        for t, k in extra.items():
            np.testing.assert_array_equal(f.tables[t].keys[: plain.tables[t].keys.shape[0]], plain.tables[t].keys)
            assert k == 0 or np.abs(sparse[t][-k:]).sum() > 0
            assert not f.tables[t].shows[plain.tables[t].keys.shape[0]:].any()


def test_two_tower_rows_are_pulled_at_the_step_not_prefetched() -> None:
    """The softmax moves the popular items' rows at every step: an async job must not pull them ahead
    (trainer.job reads ``prefetch_rows``); the click models keep the prefetched pull."""
    assert build_model(small_config("two_tower")).prefetch_rows is False
    assert build_model(small_config("wide_deep")).prefetch_rows is True


def test_served_vectors_rank_by_the_softmax_logit_with_item_biases() -> None:
    """item [v, T b] . query [u, 1] = T (<u, v> / T + b): the index ranks as the softmax's logit; the
    bias of an item is the sum of its item-tower ids' rows in the bias table."""
    model = build_model(small_config("two_tower", retrieval={"temperature": 0.2, "item_bias": {"kind": "adagrad"}}))
    assert isinstance(model, TwoTower)
    rng = np.random.default_rng(4)
    users, items = random_batch(6, seed=2), random_batch(9, seed=3)
    fu = build_features(model.config, users, model.user_slots)
    fi = build_features(model.config, items, model.item_slots)
    assert ITEM_BIAS_TABLE not in fu.tables and ITEM_BIAS_TABLE in fi.tables
    # rows per batch: a table both towers read (emb4) has other keys in each
    user_rows, item_rows = ({t: rng.normal(0, 0.5, (ti.keys.shape[0], model.row_width[t])).astype(np.float32)
                             for t, ti in f.tables.items()} for f in (fu, fi))
    q, v = model.user_vectors(fu, user_rows), model.item_vectors(fi, item_rows)
    assert q.shape == (6, 5) and v.shape == (9, 5) and (q[:, -1] == 1.0).all()
    u_tower, v_tower = model._user_out(fu, user_rows), model._item_out(fi, item_rows)
    key_row = {int(k): i for i, k in enumerate(fi.tables[ITEM_BIAS_TABLE].keys)}
    bias = np.array([sum(float(item_rows[ITEM_BIAS_TABLE][key_row[int(k)], 0]) for s in ("c", "d")
                         for k in items.slots[s][0][items.slots[s][1][j]:items.slots[s][1][j + 1]])
                     for j in range(9)])
    logit = u_tower.astype(np.float64) @ v_tower.T / 0.2 + bias[None, :]
    np.testing.assert_allclose(q @ v.T, 0.2 * logit, rtol=1e-4, atol=1e-5)
    assert (np.argsort(-(q @ v.T), axis=1, kind="stable") == np.argsort(-logit, axis=1, kind="stable")).all()
    plain = build_model(small_config("two_tower", retrieval={"temperature": 0.2}))
    assert ITEM_BIAS_TABLE not in build_features(plain.config, items, plain.item_slots).tables
    assert ITEM_BIAS_TABLE not in {t.name for t in plain.tables}


def test_softmax_row_weights_weight_each_rows_loss_and_gradient() -> None:
    """The weighted loss is the weighted mean of the rows' own losses; a row at weight 0 moves nothing
    of its own user; a negative weight is refused."""
    from models.retrieval_loss import softmax_loss

    rng = np.random.default_rng(3)
    users, items = rng.normal(size=(4, 5)).astype(np.float32), rng.normal(size=(6, 5)).astype(np.float32)
    item_hash, logq = np.arange(6, dtype=np.uint64), rng.normal(size=6).astype(np.float32)
    weight = np.array([1.0, 0.0, 0.5, 1.0], np.float32)
    loss, du, _ = softmax_loss(users, items, item_hash, logq, 0.5, weight)
    own = []
    for i in range(4):
        s = users[i].astype(np.float64) @ items.T.astype(np.float64) / 0.5 - logq
        own.append(float(np.log(np.exp(s - s.max()).sum()) + s.max() - s[i]))
    assert loss == pytest.approx(float(np.dot(weight, own) / weight.sum()), rel=1e-5)
    assert not du[1].any() and du[0].any()
    with pytest.raises(ValueError, match="row weights"):
        softmax_loss(users, items, item_hash, logq, 0.5, np.array([1.0, -1.0, 1.0, 1.0], np.float32))


def test_rows_of_another_batch_are_refused_not_read_past_their_end() -> None:
    """A table both towers read has other keys in each tower's batch: the item batch's rows given
    to the user tower are fewer than its keys, an error naming the table, never garbage."""
    model = build_model(small_config("two_tower", retrieval={"temperature": 0.2}))
    assert isinstance(model, TwoTower)
    fu = build_features(model.config, random_batch(6, seed=2), model.user_slots)
    fi = build_features(model.config, random_batch(9, seed=3), model.item_slots)
    assert fi.tables["emb4"].keys.shape[0] < fu.tables["emb4"].keys.shape[0]
    item_rows = {t: np.zeros((ti.keys.shape[0], model.row_width[t]), np.float32) for t, ti in fi.tables.items()}
    with pytest.raises(ValueError, match=r"table 'emb4': 6 rows for a batch of 12 keys"):
        model.user_vectors(fu, item_rows)
