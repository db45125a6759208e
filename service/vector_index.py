"""The Faiss item index as immutable snapshots: search a snapshot while the next one is built.

Item ids span all of uint64, but Faiss ids are int64 and -1 means "no result" (the id
2**64-1 viewed as int64 is -1), so items get internal *positions* 0..n-1 and the Faiss ids are
positions: ``pos_ids[pos]`` maps back, a sorted (id, pos) pair of arrays maps forward.

Updates never touch a snapshot someone may be searching: ``upserted`` clones the index
(IndexIDMap2 over flat; IVF holds our ids itself), removes the changed positions and adds the new vectors in one
batch each, and returns a new snapshot; the caller swaps one reference. IVF is retrained
(``rebuilt``) once enough items changed since training; HNSW cannot remove ids, so every change
a bundle brings is a full rebuild.

The live path (service.live_items) upserts small batches with ``live_upserted``: remove + add
of the batch on a clone (flat, IVF), all on its one thread. HNSW cannot remove ids and a full
rebuild per batch is far too slow, so there a live batch only *adds new items*; a changed
item keeps its bundle vector (in the graph and as its similar-items query) until the next
bundle rebuilds the index.
"""

from __future__ import annotations

from dataclasses import dataclass

import faiss
import numpy as np

from core.errors import InvalidInput, NotFound
from service.settings import IndexSettings

_TRAIN_POINTS_PER_LIST = 39  # faiss warns below this many training points per IVF list
_MAX_TRAIN_POINTS_PER_LIST = 256


def _one_omp_thread() -> None:
    """OpenMP's thread count is per calling thread: the event loop, the watcher and worker
    threads each start at the core count. Two cores shared with the event loop make Faiss's
    OpenMP teams spin against each other (100x slower updates), so every Faiss call here runs
    single-threaded in whichever thread makes it."""
    faiss.omp_set_num_threads(1)


def _dedupe_last(ids: np.ndarray, vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Unique ids, the last vector of each duplicate winning (later rows are newer)."""
    rev_ids = ids[::-1]
    uniq, first = np.unique(rev_ids, return_index=True)
    return uniq, vectors[::-1][first]


def _new_faiss(settings: IndexSettings, dim: int, train: np.ndarray) -> tuple[faiss.Index, int]:
    """An empty IndexIDMap2 of the configured kind (IVF trained on ``train``); returns it and
    how many points the training saw (0 when untrained)."""
    n = train.shape[0]
    if settings.kind == "hnsw":
        inner = faiss.IndexHNSWFlat(dim, settings.hnsw_m, faiss.METRIC_INNER_PRODUCT)
        inner.hnsw.efSearch = settings.hnsw_ef_search
        return faiss.IndexIDMap2(inner), 0
    if settings.kind == "ivf" and n >= _TRAIN_POINTS_PER_LIST:
        nlist = max(1, min(settings.nlist, n // _TRAIN_POINTS_PER_LIST))
        quantizer = faiss.IndexFlatIP(dim)
        ivf = faiss.IndexIVFFlat(quantizer, dim, nlist, faiss.METRIC_INNER_PRODUCT)
        ivf.own_fields = True
        quantizer.this.disown()  # the IVF index owns and frees its quantizer
        cap = nlist * _MAX_TRAIN_POINTS_PER_LIST
        sample = train if n <= cap else train[np.random.default_rng(0).choice(n, cap, replace=False)]
        ivf.train(np.ascontiguousarray(sample))
        ivf.nprobe = min(settings.nprobe, nlist)
        # IVF stores the given ids itself; IndexIDMap2 over IVF breaks on remove_ids (it compacts
        # its id map as if the inner index renumbered, which IVF does not)
        return ivf, n
    # flat: exact; also IVF's stand-in while there are too few items to train on
    return faiss.IndexIDMap2(faiss.IndexFlatIP(dim)), 0


@dataclass(frozen=True)
class ItemIndex:
    """One immutable item set: Faiss index + id <-> position maps + the vectors themselves."""

    settings: IndexSettings
    dim: int
    index: faiss.Index
    sorted_ids: np.ndarray  # uint64, ascending
    sorted_pos: np.ndarray  # int64, position of sorted_ids[i]
    pos_ids: np.ndarray  # uint64[n]: position -> item id
    vectors: np.ndarray  # float32[n, dim] by position
    trained_on: int  # items the IVF quantizer was trained on (0: not IVF)
    changed: int  # items upserted since the last (re)build

    @property
    def size(self) -> int:
        return int(self.pos_ids.shape[0])

    @property
    def kind(self) -> str:
        return "ivf" if self.trained_on else ("hnsw" if self.settings.kind == "hnsw" else "flat")

    @classmethod
    def build(cls, settings: IndexSettings, ids: np.ndarray, vectors: np.ndarray) -> ItemIndex:
        """A fresh index over exactly these items (duplicates: the last one wins)."""
        _one_omp_thread()
        ids, vectors = _checked(ids, vectors, None)
        ids, vectors = _dedupe_last(ids, vectors)
        n, dim = vectors.shape
        index, trained = _new_faiss(settings, dim, vectors)
        pos = np.arange(n, dtype=np.int64)
        if n:
            index.add_with_ids(vectors, pos)
        return cls(settings, dim, index, ids, pos, ids.copy(), vectors, trained, 0)

    def upserted(self, ids: np.ndarray, vectors: np.ndarray) -> ItemIndex:
        """A new snapshot with these items added or replaced; this one is left untouched."""
        ids, vectors = _checked(ids, vectors, self.dim)
        ids, vectors = _dedupe_last(ids, vectors)
        idx = np.searchsorted(self.sorted_ids, ids)
        hit = idx < self.size
        hit[hit] = self.sorted_ids[idx[hit]] == ids[hit]
        new_ids = ids[~hit]  # ascending (np.unique sorted them)
        n0, m = self.size, new_ids.shape[0]
        pos = np.empty(ids.shape[0], np.int64)
        pos[hit] = self.sorted_pos[idx[hit]]
        pos[~hit] = np.arange(n0, n0 + m, dtype=np.int64)
        all_vectors = np.concatenate([self.vectors, np.empty((m, self.dim), np.float32)])
        all_vectors[pos] = vectors
        pos_ids = np.concatenate([self.pos_ids, new_ids])
        where = idx[~hit]
        sorted_ids = np.insert(self.sorted_ids, where, new_ids)
        sorted_pos = np.insert(self.sorted_pos, where, pos[~hit])
        changed = self.changed + ids.shape[0]
        if self.settings.kind == "hnsw" or self.index.ntotal == 0:
            return ItemIndex.build(self.settings, pos_ids, all_vectors)  # HNSW cannot remove ids: rebuild
        _one_omp_thread()
        index = faiss.clone_index(self.index)
        if self.trained_on:
            faiss.extract_index_ivf(index).nprobe = faiss.extract_index_ivf(self.index).nprobe
        if hit.any():
            index.remove_ids(faiss.IDSelectorBatch(pos[hit]))
        index.add_with_ids(vectors, pos)
        return ItemIndex(self.settings, self.dim, index, sorted_ids, sorted_pos, pos_ids, all_vectors,
                         self.trained_on, changed)

    def live_upserted(self, ids: np.ndarray, vectors: np.ndarray) -> tuple[ItemIndex, int]:
        """A new snapshot for one live batch, and how many of the items were new. HNSW: only the
        new items are added; changed ones keep their vectors until the next bundle."""
        ids, vectors = _checked(ids, vectors, self.dim)
        ids, vectors = _dedupe_last(ids, vectors)
        idx = np.searchsorted(self.sorted_ids, ids)
        known = idx < self.size
        known[known] = self.sorted_ids[idx[known]] == ids[known]
        added = int((~known).sum())
        if self.settings.kind != "hnsw" or self.index.ntotal == 0:
            return self.upserted(ids, vectors), added
        if not added:
            return self, 0
        new_ids, new_vectors = ids[~known], vectors[~known]
        n0 = self.size
        pos = np.arange(n0, n0 + added, dtype=np.int64)
        _one_omp_thread()
        index = faiss.clone_index(self.index)
        faiss.downcast_index(index.index).hnsw.efSearch = self.settings.hnsw_ef_search
        index.add_with_ids(new_vectors, pos)
        where = idx[~known]
        return ItemIndex(self.settings, self.dim, index, np.insert(self.sorted_ids, where, new_ids),
                         np.insert(self.sorted_pos, where, pos), np.concatenate([self.pos_ids, new_ids]),
                         np.concatenate([self.vectors, new_vectors]), self.trained_on, self.changed + added), added

    def needs_rebuild(self) -> bool:
        """IVF: enough items changed since training (or it grew past its stand-in flat index)."""
        if self.settings.kind != "ivf":
            return False
        if not self.trained_on:
            return self.size >= 4 * _TRAIN_POINTS_PER_LIST
        return self.changed > self.settings.rebuild_fraction * self.trained_on

    def rebuilt(self) -> ItemIndex:
        return ItemIndex.build(self.settings, self.pos_ids, self.vectors)

    # ----------------------------------------------------------------- reads
    def position_of(self, item_id: int) -> int:
        i = int(np.searchsorted(self.sorted_ids, np.uint64(item_id)))
        if i >= self.size or int(self.sorted_ids[i]) != item_id:
            raise NotFound(f"item {item_id} is not in the index", detail={"item_id": str(item_id)})
        return int(self.sorted_pos[i])

    def search(self, queries: np.ndarray, k: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Top-``k`` items by inner product for each query: per query (ids uint64, scores)."""
        q = np.ascontiguousarray(np.asarray(queries, np.float32).reshape(-1, self.dim))
        if not np.isfinite(q).all():
            raise InvalidInput("query vector holds NaN or Inf")
        if self.size == 0:
            return [np.empty(0, np.uint64)] * q.shape[0], [np.empty(0, np.float32)] * q.shape[0]
        _one_omp_thread()
        scores, labels = self.index.search(q, min(k, self.size))
        ids, out_scores = [], []
        for s, lab in zip(scores, labels, strict=True):
            ok = lab >= 0
            ids.append(self.pos_ids[lab[ok]])
            out_scores.append(s[ok])
        return ids, out_scores

    def similar(self, item_id: int, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` other items for ``item_id`` (the item itself left out)."""
        pos = self.position_of(item_id)
        _one_omp_thread()
        scores, labels = self.index.search(self.vectors[pos : pos + 1], min(k + 1, self.size))
        keep = (labels[0] >= 0) & (labels[0] != pos)
        lab, sc = labels[0][keep][:k], scores[0][keep][:k]
        return self.pos_ids[lab], sc


def _checked(ids: np.ndarray, vectors: np.ndarray, dim: int | None) -> tuple[np.ndarray, np.ndarray]:
    ids = np.asarray(ids)
    vectors = np.asarray(vectors)
    if ids.ndim != 1 or vectors.ndim != 2 or ids.shape[0] != vectors.shape[0]:
        raise InvalidInput(f"items: ids {ids.shape} and vectors {vectors.shape} do not match")
    if dim is not None and vectors.shape[1] != dim:
        raise InvalidInput(f"items: vectors have dim {vectors.shape[1]}, the index has {dim}")
    if ids.dtype != np.uint64:
        raise InvalidInput(f"items: ids must be uint64, got {ids.dtype}")
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    if not np.isfinite(vectors).all():
        raise InvalidInput("items: vectors hold NaN or Inf")
    return ids, vectors
