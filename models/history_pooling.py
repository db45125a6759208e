"""Attention pooling of a list slot (the user's history) in the two_tower user tower.

Record i's ids e_0 .. e_{L-1} (the history join gives them newest first) are pooled as

    w_p = softmax_p( <q, e_p> / sqrt(dim) + b_p ),    out_i = sum_p w_p e_p

with ``q`` (dim) a learned query and ``b`` (POSITIONS) a learned bias per position, positions
past the last sharing its bias. Both start at zero, so the pooling starts as the mean (with
``retrieval.history_half_life`` h, ``b_p`` starts at ``-ln(2) p / h``: a decay by position); ``b``
learns how much recent items outweigh older ones (users' interests drift), ``q`` which items
say more about a user. The two-tower user tower cannot see the candidate item, so the query is
global, not the target attention of DIN (Zhou et al., KDD 2018).

At the default dense lr the query and biases stay near zero, so it pools nearly as the mean
does: on bench/retrieval.py's planted log the history helps recall a little, the attention over
the mean not clearly, and position biases starting as a recency-weighted mean were not kept
(figures in bench/RESULTS.md).

No wide weight is read for these ids: the history's item ids carry the items' like rates in
column 0, which say nothing about the user's click.
"""

from __future__ import annotations

import numpy as np

from core.kernel_cache import JIT, kernel

_F0 = np.float32(0.0)
POSITIONS = 128  # history length is at most 127 (logrecords.schema_config.HistoryConfig)


def position_decay(half_life: float | None) -> np.ndarray:
    """float32[POSITIONS]: the position biases' start, -ln(2) * p / half_life (None: zeros, the mean)."""
    if half_life is None:
        return np.zeros(POSITIONS, np.float32)
    return (-np.log(2.0) / half_life * np.arange(POSITIONS)).astype(np.float32)


@kernel(**JIT)
def attention_forward(rows, idx, offs, c0, dim, query, position, out, col0, weights):
    """out[i, col0:col0+dim] = the attention-pooled rows of record i's ids; weights[j] = id j's w."""
    n = offs.shape[0] - 1
    inv = np.float32(1.0) / np.sqrt(np.float32(dim))
    last = position.shape[0] - 1
    for i in range(n):
        a, b = offs[i], offs[i + 1]
        o = out[i, col0 : col0 + dim]
        o[:] = _F0
        if b == a:
            continue
        top = np.float32(-np.inf)
        for j in range(a, b):
            r = rows[idx[j]]
            s = _F0
            for k in range(dim):
                s += query[k] * r[c0 + k]
            s = s * inv + position[min(j - a, last)]
            weights[j] = s
            if s > top:
                top = s
        z = _F0
        for j in range(a, b):
            weights[j] = np.exp(weights[j] - top)
            z += weights[j]
        for j in range(a, b):
            w = weights[j] / z
            weights[j] = w
            r = rows[idx[j]]
            for k in range(dim):
                o[k] += w * r[c0 + k]


@kernel(**JIT)
def attention_backward(dout, rows, idx, offs, c0, dim, query, weights, col0, grad, dquery, dposition):
    """The adjoint of attention_forward: grad rows (aligned with rows), dquery and dposition added to."""
    n = offs.shape[0] - 1
    inv = np.float32(1.0) / np.sqrt(np.float32(dim))
    last = dposition.shape[0] - 1
    for i in range(n):
        a, b = offs[i], offs[i + 1]
        if b == a:
            continue
        d = dout[i, col0 : col0 + dim]
        # dw_p = <dout, e_p>; dlogit_p = w_p (dw_p - sum_q w_q dw_q)
        mean_dw = _F0
        for j in range(a, b):
            r = rows[idx[j]]
            dw = _F0
            for k in range(dim):
                dw += d[k] * r[c0 + k]
            mean_dw += weights[j] * dw
        for j in range(a, b):
            r = rows[idx[j]]
            g = grad[idx[j]]
            w = weights[j]
            dw = _F0
            for k in range(dim):
                dw += d[k] * r[c0 + k]
            dl = w * (dw - mean_dw)
            dposition[min(j - a, last)] += dl
            dq = dl * inv
            for k in range(dim):
                g[c0 + k] += w * d[k] + dq * query[k]
                dquery[k] += dq * r[c0 + k]
