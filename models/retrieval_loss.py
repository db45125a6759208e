"""The retrieval loss of the two towers: a softmax of each picked record's user over candidate items.

Rows are the batch's records the softmax learns from (its positives, and its label-0 records
when they are choices too: ``retrieval.label0_weight``); columns are the same records' items
(in-batch negatives: every other row's item) and then any items sampled from the catalogue. A
column holding the row's own item again (another record of the same item, or a sampled
copy of it) is masked out: it is not a negative. The logit of row i and column j is

    s_ij = <u_i, v_j> / temperature + b_j - logq_j

with ``logq_j`` the log of item j's expected count among the candidates (Yi et al., RecSys
2019: the correction that keeps popular items, which are more often in-batch negatives,
from being pushed down for it) and ``b_j`` the item's learned bias when the model has one
(0 otherwise: how much more the item is picked than its vector tells, i.e. its popularity
beyond what the correction takes out). The loss is the mean over rows of ``logsumexp_j s_ij - s_ii``,
weighted by each row's weight.

Also here: L2 normalisation of tower outputs and its backward, and the item identity of a
record (a hash of its item-tower ids) that decides which columns are the same item.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from core.kernel_cache import JIT, kernel
from logrecords.batch import Batch
from tables.hashmap import mix64

_EPS = np.float32(1e-12)


@kernel(**JIT)
def _softmax_rows(users, items, item_hash, offset, weight, inv_t, du, dv, doffset):
    """Weighted sum over rows of the loss; du, dv, doffset (zeroed) get the gradients of that sum,
    without the 1/sum(weight) (``offset``: each column's b_j - logq_j).

    One thread, no BLAS: the p x c products are small, and a threaded GEMM next to other busy
    processes waits for its threads far longer than the arithmetic takes.
    """
    p, c, d = users.shape[0], items.shape[0], users.shape[1]
    s = np.empty(c, np.float32)
    total = 0.0
    for i in range(p):
        u = users[i]
        w = weight[i]
        top = np.float32(-np.inf)
        for j in range(c):
            if j != i and item_hash[j] == item_hash[i]:
                s[j] = np.float32(-np.inf)  # the row's own item again: not a negative
                continue
            acc = np.float32(0.0)
            for k in range(d):
                acc += u[k] * items[j, k]
            s[j] = acc * inv_t + offset[j]
            if s[j] > top:
                top = s[j]
        own = s[i]
        z = np.float32(0.0)
        for j in range(c):
            s[j] = np.exp(s[j] - top)
            z += s[j]
        total += w * (np.log(z) + top - own)
        for j in range(c):
            g = s[j] / z
            if j == i:
                g -= np.float32(1.0)
            g *= w
            if g == np.float32(0.0):
                continue
            doffset[j] += g
            g *= inv_t
            for k in range(d):
                du[i, k] += g * items[j, k]
                dv[j, k] += g * u[k]
    return total


def softmax_loss(users: np.ndarray, items: np.ndarray, item_hash: np.ndarray, logq: np.ndarray,
                 temperature: float, weight: np.ndarray | None = None) -> tuple[float, np.ndarray, np.ndarray]:
    """Mean softmax loss of ``users`` (p, d) over ``items`` (c >= p, d), row i's positive in column i,
    weighted by ``weight`` (p,; None: every row 1).

    Returns the loss and its gradients for ``users`` and ``items`` (float32).
    """
    loss, du, dv, _ = softmax_loss_with_bias(users, items, item_hash, logq, np.zeros(items.shape[0], np.float32),
                                             temperature, weight)
    return loss, du, dv


def softmax_loss_with_bias(users: np.ndarray, items: np.ndarray, item_hash: np.ndarray, logq: np.ndarray,
                           bias: np.ndarray, temperature: float, weight: np.ndarray | None = None,
                           ) -> tuple[float, np.ndarray, np.ndarray, np.ndarray]:
    """``softmax_loss`` with the items' biases ``bias`` (c,) in the logits; also returns their gradient."""
    p = users.shape[0]
    w = np.ones(p, np.float32) if weight is None else np.ascontiguousarray(weight, np.float32)
    if w.shape != (p,) or (w < 0).any():
        raise ValueError(f"softmax row weights must be {p} values >= 0, got shape {w.shape}")
    du = np.zeros(users.shape, np.float32)
    dv = np.zeros(items.shape, np.float32)
    db = np.zeros(items.shape[0], np.float32)
    offset = np.ascontiguousarray(bias, np.float32) - np.ascontiguousarray(logq, np.float32)
    total = _softmax_rows(np.ascontiguousarray(users, np.float32), np.ascontiguousarray(items, np.float32),
                          np.ascontiguousarray(item_hash, np.uint64), offset, w, np.float32(1.0 / temperature),
                          du, dv, db)
    total_weight = float(w.sum())
    scale = np.float32(1.0 / total_weight if total_weight > 0 else 0.0)
    return float(total) * float(scale), du * scale, dv * scale, db * scale


def unit_rows(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows scaled to unit L2 norm, and the norms (for the backward)."""
    norm = np.sqrt(np.einsum("ij,ij->i", x, x)).astype(np.float32) + _EPS
    return (x / norm[:, None]).astype(np.float32), norm


def unit_rows_backward(dy: np.ndarray, y: np.ndarray, norm: np.ndarray) -> np.ndarray:
    """d/dx of y = x / |x|: (dy - y <y, dy>) / |x|."""
    dot = np.einsum("ij,ij->i", y, dy)
    return ((dy - y * dot[:, None]) / norm[:, None]).astype(np.float32)


@kernel(**JIT)
def _hash_slot(values, offsets, salt, out):
    """out[i] = mix(out[i] + sum of mix(id ^ salt) over record i's ids): order-free within a slot."""
    for i in range(offsets.shape[0] - 1):
        acc = np.uint64(0)
        for j in range(offsets[i], offsets[i + 1]):
            acc += mix64(values[j] ^ salt)
        out[i] = mix64(out[i] ^ acc)


def item_hashes(batch: Batch, slots: Sequence[str]) -> np.ndarray:
    """uint64[n]: one hash of each record's ids in the item slots (same item-tower input, same hash)."""
    out = np.zeros(len(batch), np.uint64)
    for k, name in enumerate(slots):
        got = batch.slots.get(name)
        if got is not None:
            _hash_slot(got[0], got[1], np.uint64(0x9E3779B97F4A7C15 * (k + 1) & 0xFFFFFFFFFFFFFFFF), out)
    return out
