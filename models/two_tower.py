"""Two-tower retrieval: a user tower (user slots + dense inputs) and an item tower (item
slots), each an MLP over pooled embeddings (L2-normalised when ``retrieval.normalize``). The
click logit (``/v1/predict``) is ``a * scale * <u, v> + wide + b`` (scale: 1/temperature when
normalised, else 1; ``a`` learned, starting at 1; ``wide``: the per-id wide weights of the
record's user and item ids, as in wide & deep); the item tower alone gives the vectors the
service indexes, the user tower the queries. A user-tower list slot with ``pooling: attention``
(the user's history) is pooled by :mod:`models.history_pooling` (a learned query and per-position
biases) instead of the EmbeddingBlock, its columns after the block's. With ``retrieval.item_bias``
the softmax's logit is ``<u, v> / temperature + b`` (``b``: the sum of the item's item-tower ids'
rows in the 1-float table ``bias.items``), and the served vectors carry it as one more column:
items ``[v, temperature * b]``, queries ``[u, 1]`` (an inner product ranks exactly as the logit).

Why the wide weights and ``a``: the softmax teaches the towers which items a user picks, not
whether they like what they picked; an item's own like rate (which the wide weight of its id
learns) is what the click needs besides the affinity, whose weight in the click ``a`` learns.
The click loss trains ``a``, ``b`` and the wide weights whatever ``retrieval.loss`` says; it
reaches the towers only with ``pointwise`` or ``both``.

Training (``config.retrieval``): ``forward`` gives the click logits the worker scores and
takes the click loss of; ``backward(dlogits)`` adds the softmax loss of each positive's user
(and each label-0 record's at ``retrieval.label0_weight``) over those records' items and any
sampled negatives (:mod:`models.retrieval_loss`),
so the worker stays the same for every model. The training-only state lives here: the
streaming item-frequency estimate of the logQ correction (:mod:`models.item_frequency`,
updated by ``backward`` from the positives; the job's one estimate in the PS when the worker
offers it, ``retrieval.shared_frequency``) and the pool of trained items the negatives are
drawn from (:mod:`models.negative_pool`, filled by ``backward``; ``features`` draws from it,
so a model that never trained, e.g. the service's, draws none).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from core.errors import InvalidInput
from logrecords.batch import Batch, Ragged
from models.base import Model
from models.embedding import EmbeddingBlock
from models.features import Features, build_features
from models.history_pooling import POSITIONS, attention_backward, attention_forward, position_decay
from models.item_frequency import FrequencyEstimate, ItemFrequency, reader_alpha
from models.item_popularity import DecayedItemCounts
from models.layers import MLP, wide_backward, wide_forward
from models.model_config import ITEM_BIAS_TABLE, ModelConfig, ModelType, Pooling, RetrievalLossKind, Tower
from models.negative_pool import NegativePool
from models.retrieval_loss import item_hashes, softmax_loss_with_bias, unit_rows, unit_rows_backward
from tables.dedupe import dedupe


@dataclass
class TwoTowerFeatures(Features):
    """Features plus the item tower's input: the n records' items, then ``n_sampled`` negatives.

    items:      item-slot tables over the same keys as ``tables`` (the negatives' keys appended there)
    item_ids:   the batch's item slots as parsed (what the pool of negatives keeps)
    item_hash:  uint64[n + n_sampled] identity of each candidate item
    pool_size:  items the negatives were drawn from (their expected count is n_sampled / pool_size)
    """

    items: Features
    item_ids: dict[str, Ragged]
    item_hash: np.ndarray
    n_sampled: int
    pool_size: int


def _concat_ragged(a: Ragged, b: Ragged) -> Ragged:
    return np.concatenate([a[0], b[0]]), np.concatenate([a[1], b[1][1:] + a[1][-1]])


def prior_columns(config: ModelConfig) -> int:
    """Columns after the towers' in the served vectors: 1 with ``retrieval.item_bias`` (item
    [v, temperature * b], query [u, 1]), else 0. Item-to-item similarity leaves them out."""
    return 1 if config.type is ModelType.TWO_TOWER and config.retrieval.item_bias is not None else 0


def served_dim(config: ModelConfig) -> int:
    """The width of the item vectors the index holds and of the user queries."""
    return config.tower_dim + prior_columns(config)


class TwoTower(Model):
    # Rows pulled ahead are stale by the prefetch depth plus the other trainers' steps meanwhile, and
    # the softmax moves the popular items' rows at every step: the prefetched pull lowered
    # bench/retrieval.py's recall (bench/RESULTS.md). Parsing still runs ahead.
    prefetch_rows = False

    def __init__(self, config: ModelConfig) -> None:
        self.user_slots = tuple(s for s in config.slots if s.tower is Tower.USER)
        self.item_slots = tuple(s for s in config.slots if s.tower is Tower.ITEM)
        # attention-pooled slots (models.history_pooling) come after the EmbeddingBlock's columns
        self.attention_slots = tuple(s for s in self.user_slots if s.pooling is Pooling.ATTENTION)
        self.user_emb = EmbeddingBlock(config, tuple(s for s in self.user_slots if s.pooling is not Pooling.ATTENTION))
        self.item_emb = EmbeddingBlock(config, self.item_slots)
        self._attention_cols = []
        col = self.user_emb.width
        for s in self.attention_slots:
            self._attention_cols.append(col)
            col += config.dim_of(s)
        self.user_width = col  # embedding columns of the user tower's input; the dense inputs follow
        self.user_mlp = MLP("user", [self.user_width + config.n_dense, *config.mlp, config.tower_dim])
        self.item_mlp = MLP("item", [self.item_emb.width, *config.mlp, config.tower_dim])
        attention = [spec for s in self.attention_slots
                     for spec in ((f"attention.{s.name}.query", (config.dim_of(s),)),
                                  (f"attention.{s.name}.position", (POSITIONS,)))]
        super().__init__(config, [*self.user_mlp.specs(), *self.item_mlp.specs(), *attention,
                                  ("score.a", (1,)), ("score.b", (1,))])
        self._attention_weights: list[np.ndarray] = []
        self._rows: dict[str, np.ndarray] = {}
        rng = np.random.default_rng(config.seed)
        self.user_mlp.init(self.params, rng)
        self.item_mlp.init(self.params, rng)
        self.params.value["score.a"][0] = 1.0
        r = config.retrieval
        for s in self.attention_slots:
            self.params.value[f"attention.{s.name}.position"][:] = position_decay(r.history_half_life)
        self.scale = np.float32(1.0 / r.temperature if r.normalize else 1.0)
        self._sample_rng = np.random.default_rng(config.seed + 1)
        # training state, made by the first backward (the service's model never allocates it)
        self.frequency: FrequencyEstimate | None = None
        self.pool: NegativePool | None = None
        self.last_softmax_loss = float("nan")
        self._observed: tuple[TwoTowerFeatures | None, np.ndarray] = (None, np.empty(0, np.float32))
        self._u = self._v = self._un = self._vn = self._dot = self._bias = np.empty(0, np.float32)
        self.item_bias = r.item_bias is not None
        # this worker's decayed item counts (models.item_popularity): kept with its part of each pass, summed at export
        self.popularity = DecayedItemCounts(r.popularity_half_life_s)

    # -- features ---------------------------------------------------------------------------------

    def features(self, batch: Batch) -> TwoTowerFeatures:
        f = build_features(self.config, batch)
        n = f.n
        names = [s.name for s in self.item_slots]
        item_ids = {s: batch.slots.get(s, (np.empty(0, np.uint64), np.zeros(n + 1, np.int64))) for s in names}
        hashes = item_hashes(batch, names)
        pool, k = self.pool, self.config.retrieval.negatives
        if pool is None or pool.size == 0 or k == 0:
            return TwoTowerFeatures(**vars(f), items=f, item_ids=item_ids, item_hash=hashes, n_sampled=0,
                                    pool_size=0)
        size = pool.size
        sampled, sampled_hash = pool.sample(k, self._sample_rng)
        slots = {s: _concat_ragged(item_ids[s], sampled.slots[s]) for s in names}
        both = Batch(labels=np.zeros(n + k, np.float32), dense=np.zeros((n + k, 0), np.float32), slots=slots)
        items = build_features(self.config, both, self.item_slots)
        tables = dict(f.tables)
        for t, ti in items.tables.items():
            base = f.tables[t]
            u = base.keys.shape[0]
            keys, idx = dedupe(np.concatenate([base.keys, ti.keys]))  # base keys first: they keep their indices
            pad = np.zeros(keys.shape[0] - u, np.float32)  # negatives were not shown: no show or click counts
            tables[t] = replace(base, keys=keys, shows=np.concatenate([base.shows, pad]),
                                clicks=np.concatenate([base.clicks, pad]))
            items.tables[t] = replace(ti, keys=keys, idx=idx[u:][ti.idx], shows=tables[t].shows,
                                      clicks=tables[t].clicks)
        return TwoTowerFeatures(n=n, labels=f.labels, dense=f.dense, tables=tables, transforms=f.transforms,
                                items=items, item_ids=item_ids,
                                item_hash=np.concatenate([hashes, sampled_hash]), n_sampled=k, pool_size=size)

    # -- towers -----------------------------------------------------------------------------------

    def _attention_input(self, f: Features, slot_name: str) -> tuple[str, np.ndarray, np.ndarray, int]:
        spec = next(s for s in self.attention_slots if s.name == slot_name)
        table = self.config.table_name(spec)
        ti = f.tables[table]
        at = [s.name for s in ti.slots].index(slot_name)
        return table, ti.idx, np.ascontiguousarray(ti.offs[at]), self.config.dim_of(spec)

    def _user_out(self, f: Features, rows: dict[str, np.ndarray], wide: np.ndarray | None = None) -> np.ndarray:
        x = np.empty((f.n, self.user_width + self.config.n_dense), np.float32)
        self.user_emb.forward(f, rows, out=x, wide=wide)
        self._attention_weights = []
        for s, col in zip(self.attention_slots, self._attention_cols, strict=True):
            table, idx, offs, dim = self._attention_input(f, s.name)
            weights = np.empty(idx.shape[0], np.float32)
            attention_forward(f.rows_of(rows, table), idx, offs, self.user_emb.c0, dim,
                              self.params.value[f"attention.{s.name}.query"],
                              self.params.value[f"attention.{s.name}.position"], x, col, weights)
            self._attention_weights.append(weights)
        x[:, self.user_width :] = f.dense
        return self.user_mlp.forward(self.params, x)

    def _attention_backward(self, f: Features, dx: np.ndarray, grads: dict[str, np.ndarray]) -> None:
        for s, col, weights in zip(self.attention_slots, self._attention_cols, self._attention_weights, strict=True):
            table, idx, offs, dim = self._attention_input(f, s.name)
            attention_backward(dx, self._rows[table], idx, offs, self.user_emb.c0, dim,
                               self.params.value[f"attention.{s.name}.query"], weights, col, grads[table],
                               self.params.grad[f"attention.{s.name}.query"],
                               self.params.grad[f"attention.{s.name}.position"])

    def _item_out(self, f: Features, rows: dict[str, np.ndarray], wide: np.ndarray | None = None) -> np.ndarray:
        return self.item_mlp.forward(self.params, self.item_emb.forward(f, rows, wide=wide))

    def _unit(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if self.config.retrieval.normalize:
            return unit_rows(x)
        return x, np.ones(x.shape[0], np.float32)

    def _item_bias(self, f: Features, rows: dict[str, np.ndarray]) -> np.ndarray:
        """float32[n]: each item's bias, the sum of its item-tower ids' rows in ITEM_BIAS_TABLE."""
        b = np.zeros(f.n, np.float32)
        ti = f.tables[ITEM_BIAS_TABLE]
        wide_forward(f.rows_of(rows, ITEM_BIAS_TABLE), ti.idx, ti.offs, b)
        return b

    def user_vectors(self, f: Features, rows: dict[str, np.ndarray]) -> np.ndarray:
        """The queries: u, and with item biases [u, 1] (the bias column's weight)."""
        u = self._unit(self._user_out(f, rows))[0]
        return np.hstack([u, np.ones((f.n, 1), np.float32)]) if self.item_bias else u

    def item_vectors(self, f: Features, rows: dict[str, np.ndarray]) -> np.ndarray:
        """What the index holds: v, and with item biases [v, temperature * b], so that an inner
        product with [u, 1] is temperature * (<u, v> / temperature + b): the softmax's ranking."""
        v = self._unit(self._item_out(f, rows))[0]
        if not self.item_bias:
            return v
        t = np.float32(self.config.retrieval.temperature)
        return np.hstack([v, (t * self._item_bias(f, rows))[:, None]])

    # -- training ---------------------------------------------------------------------------------

    def forward(self, f: Features, rows: dict[str, np.ndarray]) -> np.ndarray:
        self._f = f
        self._rows = rows
        items = f.items if isinstance(f, TwoTowerFeatures) else f
        wide = np.zeros(f.n, np.float32)
        item_wide = np.zeros(items.n, np.float32)  # the sampled negatives' too (not part of any click)
        self._u, self._un = self._unit(self._user_out(f, rows, wide))
        self._v, self._vn = self._unit(self._item_out(items, rows, item_wide))
        if self.item_bias:
            self._bias = self._item_bias(items, rows)
        self._dot = self.scale * np.einsum("ij,ij->i", self._u, self._v[: f.n])
        p = self.params.value
        return p["score.a"][0] * self._dot + wide + item_wide[: f.n] + p["score.b"][0]

    def backward(self, dlogits: np.ndarray) -> dict[str, np.ndarray]:
        grads = self._sparse_grads()
        f = self._f
        assert f is not None
        r = self.config.retrieval
        n = f.n
        dl = np.ascontiguousarray(dlogits, np.float32)
        d = dl[:, None]
        self.params.grad["score.b"][0] = dl.sum()
        self.params.grad["score.a"][0] = np.dot(dl, self._dot)
        du = np.zeros_like(self._u)
        dv = np.zeros_like(self._v)
        # the click loss reaches the towers unless the softmax alone trains them (then only the head learns from it)
        weight = {RetrievalLossKind.POINTWISE: 1.0, RetrievalLossKind.SOFTMAX: 0.0,
                  RetrievalLossKind.BOTH: r.pointwise_weight}[r.loss]
        if weight:
            g = d * (self.scale * self.params.value["score.a"][0] * np.float32(weight))
            du += g * self._v[:n]
            dv[:n] += g * self._u
        if r.loss is not RetrievalLossKind.POINTWISE and isinstance(f, TwoTowerFeatures):
            self._softmax_backward(f, du, dv, grads)
        if r.normalize:
            du = unit_rows_backward(du, self._u, self._un)
            dv = unit_rows_backward(dv, self._v, self._vn)
        dxu = self.user_mlp.backward(self.params, du)
        self.user_emb.backward(f, dxu, grads, dwide=dl)
        self._attention_backward(f, np.ascontiguousarray(dxu), grads)
        items = f.items if isinstance(f, TwoTowerFeatures) else f
        dxi = self.item_mlp.backward(self.params, dv)
        item_dwide = np.zeros(items.n, np.float32)
        item_dwide[:n] = dl
        self.item_emb.backward(items, np.ascontiguousarray(dxi), grads, dwide=item_dwide)
        return grads

    def count_items(self, batch: Batch) -> None:
        """Each record's item counted at its event time (the Kafka receipt time when the schema has none)."""
        if batch.item_id is None:
            return
        times = batch.event_time
        if times is None:
            if batch.received_at is None:
                return
            times = np.full(len(batch), batch.received_at, np.float64)
        self.popularity.observe(batch.item_id, times)

    def train_state(self) -> dict[str, np.ndarray]:
        """This worker's streaming frequency estimate (one in the PS is saved with the PS's tables; the pool
        of negatives refills within a few steps: not kept) and decayed item counts, besides the dense statistics."""
        state = super().train_state() | {f"popularity.{k}": v for k, v in self.popularity.state().items()}
        if not isinstance(self.frequency, ItemFrequency):
            return state
        return state | {f"frequency.{k}": v for k, v in self.frequency.state().items()}

    def load_train_state(self, arrays: dict[str, np.ndarray]) -> None:
        """Resume from ``train_state()``: the logQ correction goes on from the estimate, not from nothing."""
        super().load_train_state(arrays)
        counts = {k.removeprefix("popularity."): v for k, v in arrays.items() if k.startswith("popularity.")}
        self.popularity = DecayedItemCounts(self.config.retrieval.popularity_half_life_s)  # a rollback counts again
        if counts:
            self.popularity.load_state(counts)
        mine = {k.removeprefix("frequency."): v for k, v in arrays.items() if k.startswith("frequency.")}
        if not mine:
            return
        frequency = self._new_frequency()
        if isinstance(frequency, ItemFrequency):  # else the PS's estimate, restored with its tables
            frequency.load_state(mine)
        self.frequency = frequency

    def _new_frequency(self) -> FrequencyEstimate:
        r = self.config.retrieval
        shared = self.shared_estimates(r.frequency_alpha) if r.shared_frequency and self.shared_estimates else None
        if shared is not None:  # the PS's, one for the whole job (trainer.shared_frequency)
            return shared
        # frequency_alpha is per occurrence in the whole stream; this model's worker reads 1/readers of it
        return ItemFrequency(r.frequency_buckets, r.frequency_hashes, reader_alpha(r.frequency_alpha, self.readers))

    def _softmax_backward(self, f: TwoTowerFeatures, du: np.ndarray, dv: np.ndarray,
                          grads: dict[str, np.ndarray]) -> None:
        """Add the softmax loss's gradients to ``du``/``dv`` (and the item biases' to ``grads``);
        update the frequency estimate and the pool, once per batch (a repeat of it reuses its logQ)."""
        r = self.config.retrieval
        if self.frequency is None:
            self.frequency = self._new_frequency()
        if self.pool is None and r.negatives:
            self.pool = NegativePool([s.name for s in self.item_slots], capacity=r.catalogue_size,
                                     max_ids=r.catalogue_max_ids, n_dense=0)
        # the softmax's rows: the positives, and the label-0 records when they are choices too (label0_weight)
        liked = f.labels > 0.5
        pos = np.arange(f.n) if r.label0_weight > 0.0 else np.flatnonzero(liked)
        weight = np.where(liked[pos], np.float32(1.0), np.float32(r.label0_weight)).astype(np.float32)
        cols = np.concatenate([pos, f.n + np.arange(f.n_sampled)])
        col_hash = f.item_hash[cols]
        repeat = f is self._observed[0]  # the same batch again (train.steps_per_batch): its items seen once
        if repeat:
            logq = self._observed[1]
        else:
            expected = self.frequency.observe(f.item_hash[pos], col_hash if r.logq else col_hash[:0])
            if r.logq:
                if f.n_sampled:
                    expected += np.float32(f.n_sampled / f.pool_size)
                logq = np.log(expected)
            else:
                logq = np.zeros(cols.shape[0], np.float32)
            self._observed = (f, logq)
        bias = self._bias[cols] if self.item_bias else np.zeros(cols.shape[0], np.float32)
        self.last_softmax_loss, dq, dc, db = softmax_loss_with_bias(self._u[pos], self._v[cols], col_hash, logq,
                                                                    bias, r.temperature, weight)
        du[pos] += dq
        dv[cols] += dc  # cols are distinct rows of v
        if self.item_bias:
            dbias = np.zeros(f.items.n, np.float32)
            dbias[cols] = db
            ti = f.items.tables[ITEM_BIAS_TABLE]
            wide_backward(dbias, ti.idx, ti.offs, grads[ITEM_BIAS_TABLE])
        if self.pool is not None and not repeat:
            self.pool.add(f.item_ids, f.item_hash, np.arange(f.n))


def as_two_tower(model: Model) -> TwoTower:
    """``model`` as the two-tower model that item slots and item vectors need; InvalidInput if it is another."""
    if not isinstance(model, TwoTower):
        raise InvalidInput(f"item vectors need a two_tower model, this one is {model.config.type.value}")
    return model
