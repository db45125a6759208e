"""Numpy layers with hand-written backward passes: dense parameters, MLP, pooling, loss.

All dense parameters of a model live in ONE flat float32 vector (``ParamSet.values``) with
named views, and their gradients in a twin vector, so a worker pulls and pushes the whole
dense model in one PS call. Embedding pooling runs in numba kernels over the ragged
(values, offsets) slots: no per-sample Python work.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from core.kernel_cache import JIT, kernel
from tables.cache_hint import prefetch

_F0 = np.float32(0.0)
_F1 = np.float32(1.0)
_OUT_AHEAD = 8  # records ahead whose output lines pool_forward prefetches


class ParamSet:
    """Named float32 arrays that are views into one flat vector (and a twin for gradients)."""

    def __init__(self, specs: Sequence[tuple[str, tuple[int, ...]]]) -> None:
        self.shapes = dict(specs)
        sizes = [int(np.prod(s)) for _, s in specs]
        self.values = np.zeros(sum(sizes), np.float32)
        self.grads = np.zeros_like(self.values)
        self.value: dict[str, np.ndarray] = {}
        self.grad: dict[str, np.ndarray] = {}
        start = 0
        for (name, shape), size in zip(specs, sizes, strict=True):
            self.value[name] = self.values[start : start + size].reshape(shape)
            self.grad[name] = self.grads[start : start + size].reshape(shape)
            start += size

    def as_dict(self) -> dict[str, np.ndarray]:
        return {k: v.copy() for k, v in self.value.items()}

    def load(self, arrays: dict[str, np.ndarray]) -> None:
        from core.errors import CorruptData

        for name, shape in self.shapes.items():
            arr = arrays.get(name)
            if arr is None or tuple(arr.shape) != shape:
                got = None if arr is None else tuple(arr.shape)
                raise CorruptData(f"dense parameter {name!r}: expected shape {shape}, got {got}")
            self.value[name][...] = arr


def glorot(rng: np.random.Generator, fan_in: int, fan_out: int) -> np.ndarray:
    limit = np.sqrt(6.0 / (fan_in + fan_out))
    return rng.uniform(-limit, limit, (fan_in, fan_out)).astype(np.float32)


class MLP:
    """Linear layers with ReLU between them (none after the last). Parameters ``<prefix>.<i>.w/b``.

    A training step allocates nothing here once a batch size has been seen: ``forward(...,
    reuse=True)`` writes the layers' outputs into buffers kept per batch size (the last few sizes),
    and ``backward`` the input gradients into its own. Bias and ReLU are one pass after each
    matmul; backward masks through the ReLU and sums the bias gradient of the layer below in one
    pass too.
    """

    _KEEP_SIZES = 4  # batch sizes whose buffers are kept (training size, a last short batch, ...)

    def __init__(self, prefix: str, sizes: Sequence[int], *, input_grad_cols: int | None = None) -> None:
        """``input_grad_cols``: how many leading input columns ``backward`` returns the gradient of
        (None: all); wide & deep's dense inputs take none, so that share of the first layer's
        input-gradient matmul is not computed."""
        self.prefix = prefix
        self.sizes = list(sizes)
        self.input_grad_cols = self.sizes[0] if input_grad_cols is None else input_grad_cols
        if not 0 < self.input_grad_cols <= self.sizes[0]:
            raise ValueError(f"input_grad_cols must be in 1..{self.sizes[0]}, got {input_grad_cols}")
        self._acts: list[np.ndarray] = []
        self._outs: dict[int, list[np.ndarray]] = {}
        self._n = -1
        self._dx: list[np.ndarray] = []

    def specs(self) -> list[tuple[str, tuple[int, ...]]]:
        out: list[tuple[str, tuple[int, ...]]] = []
        for i, (a, b) in enumerate(zip(self.sizes[:-1], self.sizes[1:], strict=True)):
            out += [(f"{self.prefix}.{i}.w", (a, b)), (f"{self.prefix}.{i}.b", (b,))]
        return out

    def init(self, params: ParamSet, rng: np.random.Generator) -> None:
        for i, (a, b) in enumerate(zip(self.sizes[:-1], self.sizes[1:], strict=True)):
            params.value[f"{self.prefix}.{i}.w"][...] = glorot(rng, a, b)

    def _out_buffers(self, n: int) -> list[np.ndarray]:
        bufs = self._outs.get(n)
        if bufs is None:
            if len(self._outs) >= self._KEEP_SIZES:
                self._outs.clear()
            bufs = self._outs[n] = [np.empty((n, b), np.float32) for b in self.sizes[1:]]
        return bufs

    def forward(self, params: ParamSet, x: np.ndarray, *, reuse: bool = False) -> np.ndarray:
        """The last layer's output. Without ``reuse`` every output is fresh (inference callers may
        run concurrently and keep them); with it they live in this MLP's buffers until the next
        forward of the same batch size (a training step that is done with them by then)."""
        acts = [x]
        last = len(self.sizes) - 2
        outs = self._out_buffers(x.shape[0]) if reuse else None
        for i in range(last + 1):
            w, b = params.value[f"{self.prefix}.{i}.w"], params.value[f"{self.prefix}.{i}.b"]
            y = np.matmul(acts[-1], w) if outs is None else np.matmul(acts[-1], w, out=outs[i])
            if i < last:
                bias_relu(y, b)  # y > 0 is the mask in backward
            else:
                y += b
            acts.append(y)
        self._acts = acts
        return acts[-1]

    def backward(self, params: ParamSet, dy: np.ndarray) -> np.ndarray:
        """Write parameter gradients into ``params.grad`` (each is written, not added: the caller
        zeroed them or does not need the old values); returns the gradient of the first
        ``input_grad_cols`` input columns (valid until the next backward with the same batch size:
        training only)."""
        acts = self._acts
        n = dy.shape[0]
        if self._n != n:  # the input gradients of every layer, allocated once per batch size
            self._n = n
            self._dx = [np.empty((n, a), np.float32) for a in [self.input_grad_cols, *self.sizes[1:-1]]]
        top = len(self.sizes) - 2
        np.sum(dy, axis=0, out=params.grad[f"{self.prefix}.{top}.b"])
        for i in range(top, -1, -1):
            w = params.value[f"{self.prefix}.{i}.w"]
            np.matmul(acts[i].T, dy, out=params.grad[f"{self.prefix}.{i}.w"])
            if i > 0 and dy.shape[1] == 1:
                # one output (a logit): dx is an outer product, which gemm runs ~10x slower than this
                # pass that also masks through the ReLU below and sums that layer's bias gradient
                outer_relu_grad_bias(dy[:, 0], w[:, 0], acts[i], self._dx[i], params.grad[f"{self.prefix}.{i - 1}.b"])
                dy = self._dx[i]
                continue
            # w[:cols].T: a transposed view (BLAS reads it as is), only the input columns wanted
            dx = np.matmul(dy, w[: self._dx[i].shape[1]].T, out=self._dx[i])
            if i > 0:  # through the ReLU of the layer below, and that layer's bias gradient, in one pass
                relu_grad_bias(dx, acts[i], params.grad[f"{self.prefix}.{i - 1}.b"])
            dy = dx
        return dy


@kernel(**JIT)
def bias_relu(y, b):
    """y = max(y + b, 0) in place, one pass (b broadcast over rows)."""
    n, m = y.shape
    for i in range(n):
        r = y[i]
        for j in range(m):
            v = r[j] + b[j]
            r[j] = v if v > _F0 else _F0


@kernel(**JIT)
def relu_grad_bias(dx, act, db):
    """dx = 0 where the ReLU output ``act`` was not positive, in place, and db = dx's column sums
    (the bias gradient of the ReLU's layer), in one pass."""
    n, m = dx.shape
    for j in range(m):
        db[j] = _F0
    for i in range(n):
        d, a = dx[i], act[i]
        for j in range(m):
            v = d[j] if a[j] > _F0 else _F0
            d[j] = v
            db[j] += v


@kernel(**JIT)
def outer_relu_grad_bias(dy, w, act, dx, db):
    """dx = outer(dy, w) where the ReLU output ``act`` was positive, else 0, and db = dx's column
    sums: the input gradient of a one-output layer through the ReLU below it, in one pass."""
    n, m = dx.shape
    for j in range(m):
        db[j] = _F0
    for i in range(n):
        d, a, g = dx[i], act[i], dy[i]
        for j in range(m):
            v = g * w[j] if a[j] > _F0 else _F0
            d[j] = v
            db[j] += v


def bce_with_logits(logits: np.ndarray, labels: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    """Mean binary cross-entropy, the probabilities and d(mean loss)/d(logits)."""
    z = np.ascontiguousarray(logits, np.float32)
    y = np.ascontiguousarray(labels, np.float32)
    prob = np.empty(z.shape[0], np.float32)
    dlogits = np.empty(z.shape[0], np.float32)
    loss = _bce(z, y, prob, dlogits)
    return loss / z.shape[0] if z.shape[0] else 0.0, prob, dlogits


@kernel(**JIT)
def _bce(z, y, prob, dz):
    """One pass (one exp per logit, where numpy's form took three passes of three): prob, dz =
    (prob - y) / n and the summed loss max(z, 0) - z y + log(1 + exp(-|z|)), finite for any z."""
    n = z.shape[0]
    inv_n = _F1 / np.float32(max(1, n))
    total = 0.0
    for i in range(n):
        zi = z[i]
        e = np.exp(-abs(zi))
        p = _F1 / (_F1 + e) if zi >= _F0 else e / (_F1 + e)
        prob[i] = p
        dz[i] = (p - y[i]) * inv_n
        total += max(zi, _F0) - zi * y[i] + np.log1p(e)
    return total


@kernel(**JIT)
def pool_forward(rows, idx, offs, c0, dim, mean, out, col0, wide, with_wide):
    """out[i, col0 + s*dim : ...] = sum (or mean) of rows[idx[j], c0:c0+dim] for j in slot s of record i:
    gathered and pooled straight into the next layer's input. With ``with_wide`` also wide[i] +=
    the wide weights (column 0) of those ids, in the same pass over them. (Row slices, the first
    id copied rather than added to zeros: 1.5x faster than indexing the 2-d arrays per element.)

    ``out``'s lines are prefetched a few records ahead: a slot's columns of every record are a
    strided walk (one line per record) that the hardware prefetcher does not follow, and in a
    training step the input buffer comes back from memory (the shard and the other worker
    evict it between steps): in-situ 0.73-0.76 -> 0.44-0.46 us per sample, ~10 us slower per
    call when it is in cache."""
    n_slots, n = offs.shape[0], offs.shape[1] - 1
    for s in range(n_slots):
        base = col0 + s * dim
        ms = mean[s]
        for i in range(n):
            if i + _OUT_AHEAD < n:
                ahead = out[i + _OUT_AHEAD]
                prefetch(ahead, base)
                prefetch(ahead, base + dim - 1)  # a slot's columns may straddle two lines
            a, b = offs[s, i], offs[s, i + 1]
            o = out[i, base : base + dim]
            if b == a:
                o[:] = _F0
                continue
            r = rows[idx[a]]
            acc = r[0]
            for k in range(dim):
                o[k] = r[c0 + k]
            for j in range(a + 1, b):
                r = rows[idx[j]]
                acc += r[0]
                for k in range(dim):
                    o[k] += r[c0 + k]
            if with_wide:
                wide[i] += acc
            if ms and b - a > 1:
                scale = _F1 / np.float32(b - a)
                for k in range(dim):
                    o[k] *= scale


@kernel(**JIT)
def pool_backward(dout, idx, offs, c0, dim, mean, grad, col0, dwide, with_wide):
    """Scatter-add the pooled gradient back to the unique rows (the adjoint of pool_forward), and
    with ``with_wide`` dwide[i] to the wide weight of every id of record i."""
    n_slots, n = offs.shape[0], offs.shape[1] - 1
    for s in range(n_slots):
        base = col0 + s * dim
        ms = mean[s]
        for i in range(n):
            a, b = offs[s, i], offs[s, i + 1]
            if b == a:
                continue
            scale = _F1 / np.float32(b - a) if ms and b - a > 1 else _F1
            d = dout[i, base : base + dim]
            dz = dwide[i] if with_wide else _F0
            for j in range(a, b):
                g = grad[idx[j]]
                if with_wide:
                    g[0] += dz
                gg = g[c0 : c0 + dim]
                for k in range(dim):
                    gg[k] += d[k] * scale


@kernel(**JIT)
def wide_forward(rows, idx, offs, out):
    """out[i] += sum of the wide weights (column 0) of every id of record i, over all slots."""
    n_slots, n = offs.shape[0], offs.shape[1] - 1
    for s in range(n_slots):
        for i in range(n):
            acc = _F0
            for j in range(offs[s, i], offs[s, i + 1]):
                acc += rows[idx[j], 0]
            out[i] += acc


@kernel(**JIT)
def wide_backward(dz, idx, offs, grad):
    n_slots, n = offs.shape[0], offs.shape[1] - 1
    for s in range(n_slots):
        for i in range(n):
            for j in range(offs[s, i], offs[s, i + 1]):
                grad[idx[j], 0] += dz[i]
