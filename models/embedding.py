"""Pooled embeddings of a set of slots, concatenated: the input block every deep model shares.

Columns are laid out table by table (tables in first-appearance order of ``slots``), each
table's slots in order, ``dim`` columns per slot. Rows pulled from a table are
``[wide weight,] embedding``; ``c0`` skips the wide weight. A model whose wide part sums the
same slots' ids (wide & deep) has the block add the wide weights in its pooling pass
(``wide=``), and scatter their gradient in its backward pass (``dwide=``).
"""

from __future__ import annotations

import numpy as np

from models.features import Features
from models.layers import pool_backward, pool_forward
from models.model_config import ModelConfig, SlotSpec

_NONE = np.zeros(0, np.float32)  # the kernels' wide array when there is none (one compiled signature)


class EmbeddingBlock:
    def __init__(self, config: ModelConfig, slots: tuple[SlotSpec, ...]) -> None:
        self.c0 = 1 if config.wide else 0
        self.layout: list[tuple[str, list[str], int, int]] = []  # table, slot names, dim, first column
        col = 0
        for s in slots:
            table, dim = config.table_name(s), config.dim_of(s)
            for entry in self.layout:
                if entry[0] == table:
                    entry[1].append(s.name)
                    break
            else:
                self.layout.append((table, [s.name], dim, -1))
        fixed = []
        for table, names, dim, _ in self.layout:
            fixed.append((table, names, dim, col))
            col += dim * len(names)
        self.layout = fixed
        self.width = col
        self._sel: list[tuple[np.ndarray, np.ndarray]] = []
        # table -> (the batch's slot tuple, positions of this block's slots in it, or None for all):
        # features reuse one slot tuple per table, and matching 26 names against 26 cost ~28 us a step
        self._pos: dict[str, tuple[tuple[SlotSpec, ...], list[int] | None]] = {}

    def _select(self, f: Features, table: str, names: list[str]) -> tuple[np.ndarray, np.ndarray]:
        ti = f.tables[table]
        hit = self._pos.get(table)
        if hit is None or hit[0] is not ti.slots:
            pos: list[int] | None = [i for i, s in enumerate(ti.slots) if s.name in names]
            hit = self._pos[table] = (ti.slots, None if len(pos) == len(ti.slots) else pos)
        pos = hit[1]
        if pos is None:
            return ti.offs, ti.mean
        return np.ascontiguousarray(ti.offs[pos]), ti.mean[pos]

    def forward(self, f: Features, rows: dict[str, np.ndarray], out: np.ndarray | None = None,
                wide: np.ndarray | None = None) -> np.ndarray:
        """Pooled embeddings into ``out`` (n, >= width; fresh when None). With ``wide`` (float32[n],
        rows with a wide weight) also wide[i] += the wide weights of record i's ids in these slots."""
        if out is None:
            out = np.empty((f.n, self.width), np.float32)
        if wide is not None and not self.c0:
            raise ValueError("wide= needs rows with a wide weight")
        self._sel = []
        for table, names, dim, col in self.layout:
            offs, mean = self._select(f, table, names)
            self._sel.append((offs, mean))
            pool_forward(f.rows_of(rows, table), f.tables[table].idx, offs, self.c0, dim, mean, out, col,
                         _NONE if wide is None else wide, wide is not None)
        return out

    def backward(self, f: Features, dout: np.ndarray, grads: dict[str, np.ndarray],
                 dwide: np.ndarray | None = None) -> None:
        """Scatter-add ``dout`` (n, width) into ``grads[table]`` (u, row width); with ``dwide``
        (float32[n]) also dwide[i] into the wide weight of every id of record i."""
        for (table, _, dim, col), (offs, mean) in zip(self.layout, self._sel, strict=True):
            pool_backward(dout, f.tables[table].idx, offs, self.c0, dim, mean, grads[table], col,
                          _NONE if dwide is None else dwide, dwide is not None)
