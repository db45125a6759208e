"""The Faiss item index: search one copy while the other is updated.

Item ids span all of uint64, but Faiss ids are int64 and -1 means "no result" (the id
2**64-1 viewed as int64 is -1), so items get internal *positions* 0..n-1 and the Faiss labels
are positions: ``pos_ids[pos]`` maps back, a sorted (id, pos) pair of arrays maps forward.
Positions are dense and only ever appended, so flat and IVF indexes need no id map: a flat
index's row is the position, and IVF keeps an array direct map (position -> list entry), which
lets it move a changed vector to its new list in place (``update_vectors``) without scanning
every list for the old entry.

Two ways to change an index, never one someone is searching:
- ``upserted`` (bundles) copies the index, changes the copy and returns it as a new snapshot;
  IVF is retrained (``rebuilt``) once enough items changed since training; HNSW cannot remove
  ids, so every change a bundle brings is a full rebuild.
- ``upsert_in_place`` (the live path, service.live_items) changes this index itself: its
  caller guarantees no reader holds it (the model store's two sides take turns: one is
  written while the other serves). It costs the batch, not a copy of the index (a copy of
  200k items twice a second cost the request threads 1.3-1.5x their p99). HNSW cannot remove
  ids, so there a live batch only *adds new items*; a changed item keeps its bundle vector (in
  the graph and as its similar-items query) until the next bundle rebuilds the index.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

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


def _with_room(vectors: np.ndarray, rows: int) -> np.ndarray:
    """A buffer holding ``vectors`` in its first rows with room for new items, so that adding a
    few does not copy them all."""
    n, dim = vectors.shape
    buf = np.empty((max(rows, n + max(1024, n // 8)), dim), np.float32)
    buf[:n] = vectors
    return buf


def _new_faiss(settings: IndexSettings, dim: int, train: np.ndarray) -> tuple[faiss.Index, int]:
    """An empty index of the configured kind (IVF trained on ``train``); returns it and how many
    points the training saw (0 when untrained). Flat and IVF label vectors by the order they
    were added in; HNSW by the ids given (IndexIDMap2)."""
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
        ivf.make_direct_map(True)  # an array: position -> (list, offset), for update_vectors
        return ivf, n
    # flat: exact; also IVF's stand-in while there are too few items to train on
    return faiss.IndexFlatIP(dim), 0


@dataclass(frozen=True)
class ItemIndex:
    """One item set: Faiss index + id <-> position maps + the vectors themselves."""

    settings: IndexSettings
    dim: int
    index: faiss.Index
    sorted_ids: np.ndarray  # uint64, ascending
    sorted_pos: np.ndarray  # int64, position of sorted_ids[i]
    pos_ids: np.ndarray  # uint64[n]: position -> item id
    vectors: np.ndarray  # float32[n, dim] by position: the first n rows of ``buffer``
    trained_on: int  # items the IVF quantizer was trained on (0: not IVF)
    changed: int  # items upserted since the last (re)build
    buffer: np.ndarray | None = field(repr=False, compare=False, default=None)

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
            _add(index, vectors, pos)
        buf = _with_room(vectors, n)
        return cls(settings, dim, index, ids, pos, ids.copy(), buf[:n], trained, 0, buf)

    def copy(self) -> ItemIndex:
        """An independent copy (the Faiss index and the vectors): the one to change while this serves."""
        _one_omp_thread()
        index = faiss.clone_index(self.index)
        if self.trained_on:
            faiss.extract_index_ivf(index).nprobe = faiss.extract_index_ivf(self.index).nprobe
        elif self.settings.kind == "hnsw":
            faiss.downcast_index(index.index).hnsw.efSearch = self.settings.hnsw_ef_search
        buf = _with_room(self.vectors, self.buffer.shape[0] if self.buffer is not None else 0)
        return replace(self, index=index, vectors=buf[: self.size], buffer=buf)

    def upserted(self, ids: np.ndarray, vectors: np.ndarray) -> ItemIndex:
        """A new snapshot with these items added or replaced; this one is left untouched."""
        ids, vectors = _checked(ids, vectors, self.dim)
        if self.settings.kind == "hnsw" or self.index.ntotal == 0:  # HNSW cannot remove ids: rebuild
            return ItemIndex.build(self.settings, np.concatenate([self.pos_ids, ids]),
                                   np.concatenate([self.vectors, vectors]))
        fresh, _ = self.copy()._changed_in_place(ids, vectors)
        return replace(fresh, changed=self.changed + int(np.unique(ids).shape[0]))

    def live_upserted(self, ids: np.ndarray, vectors: np.ndarray) -> tuple[ItemIndex, int]:
        """``upsert_in_place`` on a copy: a new snapshot, and how many of the items were new."""
        return self.copy().upsert_in_place(ids, vectors)

    def upsert_in_place(self, ids: np.ndarray, vectors: np.ndarray) -> tuple[ItemIndex, int]:
        """Change THIS index (nobody may be searching it) with one live batch; returns the item
        set after it (the same Faiss index and buffer, new id maps) and how many items were new.
        HNSW: only the new items are added. Only new items count towards an IVF retrain: a
        refreshed vector is reassigned to its nearest list as it is written."""
        ids, vectors = _checked(ids, vectors, self.dim)
        if self.index.ntotal == 0:
            fresh = ItemIndex.build(self.settings, ids, vectors)
            return fresh, fresh.size
        before = self.size
        fresh, added = self._changed_in_place(ids, vectors)
        return replace(fresh, changed=self.changed + (fresh.size - before)), added

    def _changed_in_place(self, ids: np.ndarray, vectors: np.ndarray) -> tuple[ItemIndex, int]:
        _one_omp_thread()
        ids, vectors = _dedupe_last(ids, vectors)
        idx = np.searchsorted(self.sorted_ids, ids)
        hit = idx < self.size
        hit[hit] = self.sorted_ids[idx[hit]] == ids[hit]
        new_ids = ids[~hit]  # ascending (np.unique sorted them)
        n0, m = self.size, new_ids.shape[0]
        buf = self.buffer
        if buf is None or buf.shape[0] < n0 + m:
            buf = _with_room(self.vectors, 2 * (n0 + m))
        pos_hit = self.sorted_pos[idx[hit]]
        if hit.any() and self.settings.kind != "hnsw":
            buf[pos_hit] = vectors[hit]
            _replace(self.index, self.trained_on > 0, pos_hit, vectors[hit])
        if not m:
            return replace(self, vectors=buf[:n0], buffer=buf), 0
        new_pos = np.arange(n0, n0 + m, dtype=np.int64)
        buf[n0 : n0 + m] = vectors[~hit]
        _add(self.index, vectors[~hit], new_pos)
        where = idx[~hit]
        return replace(self, sorted_ids=np.insert(self.sorted_ids, where, new_ids),
                       sorted_pos=np.insert(self.sorted_pos, where, new_pos),
                       pos_ids=np.concatenate([self.pos_ids, new_ids]), vectors=buf[: n0 + m], buffer=buf), m

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

    def similar(self, item_id: int, k: int, *, prior_columns: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` other items for ``item_id`` (the item itself left out). ``prior_columns``: the
        vectors' last columns that are not the item tower's (two_tower's item bias,
        models.two_tower.prior_columns): zero in the query, so items are alike by their towers alone
        (an approximate index, whose lists or graph the prior column shaped, is asked for 4x the
        candidates, at least 64, rescored exactly on the tower columns)."""
        pos = self.position_of(item_id)
        _one_omp_thread()
        query = self.vectors[pos : pos + 1].copy()
        if not prior_columns or self.kind == "flat":
            query[:, self.dim - prior_columns :] = 0.0
            scores, labels = self.index.search(query, min(k + 1, self.size))
        else:  # IVF lists and the HNSW graph were built with the prior column: widen, then rescore exactly
            tower = self.dim - prior_columns
            query[:, tower:] = 0.0
            _, found = self.index.search(query, min(max(4 * (k + 1), 64), self.size))
            found = found[:, found[0] >= 0]
            exact = self.vectors[found[0], :tower] @ query[0, :tower]
            order = np.argsort(-exact, kind="stable")[: k + 1]
            scores, labels = exact[order][None, :], found[:, order]
        keep = (labels[0] >= 0) & (labels[0] != pos)
        lab, sc = labels[0][keep][:k], scores[0][keep][:k]
        return self.pos_ids[lab], sc


def _add(index: faiss.Index, vectors: np.ndarray, pos: np.ndarray) -> None:
    """Append ``vectors`` at positions ``pos`` (the next ones: flat and IVF label by order)."""
    if isinstance(index, faiss.IndexIDMap2):
        index.add_with_ids(vectors, pos)
    else:
        assert index.ntotal == int(pos[0]), "positions are appended in order"
        index.add(vectors)


def _replace(index: faiss.Index, ivf: bool, pos: np.ndarray, vectors: np.ndarray) -> None:
    """Overwrite the vectors at positions ``pos`` (flat or IVF)."""
    if ivf:  # moves each entry to its vector's nearest list through the direct map
        index.update_vectors(np.ascontiguousarray(pos, np.int64), vectors)
        return
    rows = faiss.rev_swig_ptr(index.get_xb(), index.ntotal * index.d).reshape(index.ntotal, index.d)
    rows[pos] = vectors


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
