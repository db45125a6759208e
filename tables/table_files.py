"""Saving and loading a SparseTable (base and delta) through checkpoint files.

Files in the save directory, per table ``<name>``:
  ``<name>.rows``        rows in chunks of ``chunk_rows``; each chunk holds every column's
                         raw bytes for those rows, columns in manifest order;
  ``<name>.tombstones``  array container: ids evicted since the cursor's previous save and
                         their epochs (a base keeps every tombstone another cursor may still
                         need, so a table restored from it can write that cursor's deltas);
  ``<name>.state``       array container: admission state (sketches, counters);
  ``<name>.manifest.json`` written last: layout, chain (save id, parent id, epochs),
                         counters, and size + CRC-32C of each file.
A save is two steps (:class:`TableSave`): the consistent point, taken under the table lock
(a copy-on-write snapshot, :mod:`tables.snapshot`: microseconds for a base, one pass over
a column to pick a delta's changed rows), then the writing, during which pushes go on. A
PS shard replies to a detached save between the two.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from pydantic import ValidationError

from core.atomic_files import (
    FORMAT_VERSION,
    AtomicWriter,
    decode_arrays,
    encode_arrays,
    read_json,
    read_verified,
    write_bytes,
    write_json,
)
from core.errors import Conflict, CorruptData, InvalidInput
from tables import hashmap
from tables.admission import make_admission
from tables.rows import RowStore
from tables.snapshot import RowSnapshot
from tables.table_config import TableConfig

if TYPE_CHECKING:
    from tables.sparse_table import SparseTable

CHUNK_ROWS = 1 << 16


def _layout(t: SparseTable) -> dict[str, Any]:
    return {
        "dim": t.dim, "wide": t.config.wide, "width": t.width,
        "optimizer": t.config.optimizer.kind, "wide_optimizer": t.config.wide_optimizer.kind if t.config.wide else None,
        "columns": {name: [c.dtype.str, *c.shape[1:]] for name, c in t._rows.cols.items()},
        # Seed and initializers decide what never-seen ids read as: a restore must keep them.
        "seed": t.config.seed, "initializer": t.config.initializer.model_dump(),
        "wide_initializer": t.config.wide_initializer.model_dump() if t.config.wide else None,
    }


def _policy(t: SparseTable) -> dict[str, Any]:
    """The effective admission and eviction settings (``set_policy`` may have changed them)."""
    return {"admission": t.config.admission.model_dump(), "eviction": t.config.eviction.model_dump()}


class TableSave:
    """A save whose consistent point is taken (:func:`begin_save`); :meth:`write` writes it.

    Holds the table's save lock from the consistent point until :meth:`write` or
    :meth:`abort` returns, so exactly one of them must be called (once)."""

    def __init__(self, t: SparseTable, path: Path, *, mode: str, cursor: str) -> None:
        if mode not in ("base", "delta"):
            raise InvalidInput(f"table {t.name}: save mode must be 'base' or 'delta', got {mode!r}")
        self.table, self.path, self.mode, self.cursor = t, path, mode, cursor
        t._save_lock.acquire()
        try:
            with t._lock:
                self._take(t)
        except BaseException:
            t._save_lock.release()
            raise

    def _take(self, t: SparseTable) -> None:
        """Under the table lock: everything the save holds is as of this instant."""
        prev = t._cursors.get(self.cursor)
        if self.mode == "delta" and prev is None:
            raise Conflict(f"table {t.name}: no base saved on cursor '{self.cursor}' yet; save a base first")
        self.prev, self.epoch = prev, t._epoch
        t._epoch += 1
        self.since = prev.epoch if self.mode == "delta" else 0
        self.state = {k: v.copy() for k, v in t._admission.state().items()}
        self.head = {"pass": t._pass, "counters": dict(t.counters), "policy": _policy(t),
                     "cursors": {c: [v.epoch, v.save_id] for c, v in t._cursors.items()}}
        self.layout = _layout(t)
        n = t._rows.n
        only = None if self.mode == "base" else t._rows.cols["mod_epoch"][:n] > self.since
        self.snap: RowSnapshot | None = RowSnapshot(t._rows, CHUNK_ROWS, only=only)
        t._snapshot = self.snap
        if self.mode == "base":
            self.tomb, self.tomb_ep = t._tomb_keys.copy(), t._tomb_epochs.copy()
        else:
            new_tomb = t._tomb_epochs > self.since
            self.tomb, self.tomb_ep = t._tomb_keys[new_tomb], t._tomb_epochs[new_tomb]

    def _end_snapshot(self) -> None:
        if self.snap is not None:
            t = self.table
            with t._lock:
                t._snapshot = None
                t._idle.notify_all()
            self.snap = None

    def abort(self) -> None:
        """Give the consistent point up without writing (pushes stop keeping pre-images)."""
        try:
            self._end_snapshot()
        finally:
            self.table._save_lock.release()

    def write(self) -> dict[str, Any]:
        """Write the files and the manifest (last); returns the manifest."""
        try:
            return self._write()
        finally:
            self.abort()

    def _write(self) -> dict[str, Any]:
        t, path = self.table, self.path
        path.mkdir(parents=True, exist_ok=True)
        save_id = uuid.uuid4().hex
        with AtomicWriter(path / f"{t.name}.rows") as w:
            chunks = _Rechunker(w)
            assert self.snap is not None
            while not self.snap.done:
                with t._lock:
                    chunk = self.snap.next_chunk(t._rows)
                chunks.add(chunk)  # written outside the lock: pushes go on meanwhile
            n_rows = chunks.close()
            rows_entry = w.commit()
        self._end_snapshot()
        files = {
            "rows": rows_entry,
            "tombstones": write_bytes(path / f"{t.name}.tombstones",
                                      encode_arrays({"keys": self.tomb, "epochs": self.tomb_ep})),
            "state": write_bytes(path / f"{t.name}.state", encode_arrays(self.state)),
        }
        manifest = {
            "format": FORMAT_VERSION, "table": t.name, "mode": self.mode, "cursor": self.cursor, "save_id": save_id,
            "parent_id": self.prev.save_id if self.mode == "delta" else None, "epoch": self.epoch,
            "since_epoch": self.since, "rows": n_rows, "tombstones": int(self.tomb.shape[0]),
            "chunk_rows": CHUNK_ROWS, "layout": self.layout, "files": files, "created_at": time.time(), **self.head,
        }
        write_json(path / f"{t.name}.manifest.json", manifest)
        with t._lock:
            from tables.sparse_table import Cursor

            t._cursors[self.cursor] = Cursor(self.epoch, save_id)
            _prune_tombstones(t)
        return manifest


class _Rechunker:
    """Writes held rows in chunks of exactly ``CHUNK_ROWS`` (the last may be short), each
    chunk's columns in order, whatever sizes the snapshot's parts come in (a delta's parts
    hold only its changed rows)."""

    def __init__(self, w: AtomicWriter) -> None:
        self.w = w
        self.parts: list[dict[str, np.ndarray]] = []
        self.held = 0
        self.rows = 0

    def add(self, cols: dict[str, np.ndarray]) -> None:
        n = next(iter(cols.values())).shape[0]
        if n:
            self.parts.append(cols)
            self.held += n
            self.rows += n
        while self.held >= CHUNK_ROWS:
            self._emit(CHUNK_ROWS)

    def _emit(self, n: int) -> None:
        merged = self.parts[0] if len(self.parts) == 1 else {
            name: np.concatenate([p[name] for p in self.parts]) for name in self.parts[0]}
        for col in merged.values():
            self.w.write(col[:n])
        self.held -= n
        self.parts = [{name: col[n:] for name, col in merged.items()}] if self.held else []

    def close(self) -> int:
        """Write what is held; returns the number of rows written."""
        if self.held:
            self._emit(self.held)
        return self.rows


def _prune_tombstones(t: SparseTable) -> None:
    """Under the lock: drop the tombstones every cursor's last save already covers."""
    floor = min(c.epoch for c in t._cursors.values())
    keep = t._tomb_epochs > floor
    t._tomb_keys, t._tomb_epochs = t._tomb_keys[keep], t._tomb_epochs[keep]


def _decode_rows(buf: memoryview, man: dict[str, Any], into: dict[str, np.ndarray], source: str) -> None:
    """Fill ``into`` (column -> array with >= n rows) from a verified rows file."""
    n, chunk = int(man["rows"]), int(man["chunk_rows"])
    row_bytes = sum(c.dtype.itemsize * (c.shape[1] if c.ndim == 2 else 1) for c in into.values())
    if len(buf) != n * row_bytes or chunk <= 0:
        raise CorruptData(f"{source}: holds {len(buf)} bytes, expected {n} rows x {row_bytes} bytes")
    raw = np.frombuffer(buf, np.uint8)
    off = 0
    for a in range(0, n, chunk):
        b = min(a + chunk, n)
        for col in into.values():
            nb = (b - a) * col.dtype.itemsize * (col.shape[1] if col.ndim == 2 else 1)
            col[a:b] = raw[off : off + nb].view(col.dtype).reshape((b - a, *col.shape[1:]))
            off += nb


def load_table(t: SparseTable, path: Path) -> dict[str, Any]:
    mpath = path / f"{t.name}.manifest.json"
    man = read_json(mpath)
    try:
        mode, n = man["mode"], int(man["rows"])
        if man["format"] != FORMAT_VERSION or man["table"] != t.name or mode not in ("base", "delta"):
            raise CorruptData(f"{mpath}: format {man['format']}, table {man['table']!r}, mode {mode!r} "
                              f"not loadable into table {t.name!r} (format {FORMAT_VERSION})")
        files = {k: man["files"][k] for k in ("rows", "tombstones", "state")}
        if not all(isinstance(e, dict) and {"file", "bytes", "crc32c"} <= e.keys() for e in files.values()):
            raise TypeError("each file entry needs 'file', 'bytes' and 'crc32c'")
        # Parse every field used below now: once the table is being changed under the lock,
        # a missing or mistyped field must not leave it half-loaded.
        cursor, save_id, parent_id = str(man["cursor"]), str(man["save_id"]), man["parent_id"]
        epoch, pass_ = int(man["epoch"]), int(man["pass"])
        counters = {k: int(v) for k, v in man.get("counters", {}).items() if k in t.counters}
        cursors = {str(c): (int(ep), str(sid)) for c, (ep, sid) in man.get("cursors", {}).items()}
        policy = {"admission": dict(man["policy"]["admission"]), "eviction": dict(man["policy"]["eviction"])}
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise CorruptData(f"{mpath}: malformed manifest ({exc!r})") from None
    # A restore continues the same job: it adopts the policy in force when the save was made
    # (PUT /admin/tables/{name}/policy may have changed it since the YAML was written).
    try:
        adopted = TableConfig.model_validate({**t.config.model_dump(), **policy})
    except ValidationError as exc:
        raise CorruptData(f"{mpath}: saved admission/eviction policy is invalid ({exc.errors()[0]['msg']})") from None
    layout = _layout(t)
    if man.get("layout") != layout:
        diff = sorted(k for k in layout if man.get("layout", {}).get(k) != layout[k])
        raise Conflict(f"{mpath}: saved layout differs from table {t.name!r} config in {diff}",
                       detail={"fields": diff})
    bufs = {k: read_verified(path, e) for k, e in files.items()}
    tomb_src = str(path / files["tombstones"]["file"])
    tomb_arrays = decode_arrays(bufs["tombstones"], tomb_src)
    tomb, tomb_ep = tomb_arrays.get("keys"), tomb_arrays.get("epochs")
    if tomb is None or tomb_ep is None or tomb.dtype != np.uint64 or tomb_ep.dtype != np.uint32 \
            or tomb.ndim != 1 or tomb_ep.shape != tomb.shape:
        raise CorruptData(f"{tomb_src}: expected uint64 keys and uint32 epochs of one length",
                          detail={"file": tomb_src})
    state = decode_arrays(bufs["state"], str(path / files["state"]["file"]))
    admission = make_admission(adopted.admission, t.config.seed)
    try:
        admission.load_state(state)
    except (KeyError, ValueError) as exc:
        raise CorruptData(f"{path}: admission state does not fit the table ({exc!r})") from None
    rows_src = str(path / files["rows"]["file"])
    if mode == "base":
        store = RowStore(t._rows.widths, max(n, t.config.initial_capacity))
        _decode_rows(bufs["rows"], man, store.cols, rows_src)
        store.n = n
        slots = np.zeros(hashmap.slots_for(max(n, t.config.initial_capacity)), np.uint64)
        hashmap.rebuild(slots, store.cols["keys"], n)
    else:
        delta = {name: np.empty((n, *c.shape[1:]), c.dtype) for name, c in t._rows.cols.items()}
        _decode_rows(bufs["rows"], man, delta, rows_src)
    with t._lock:
        t._wait_idle()
        if mode == "base":
            t._rows, t._slots = store, slots
            t._cursors.clear()
            t._tomb_keys, t._tomb_epochs = tomb, tomb_ep  # kept for other cursors' deltas, not applied
        else:
            cur = t._cursors.get(cursor)
            if cur is None or cur.save_id != parent_id:
                raise Conflict(f"{mpath}: delta follows save {parent_id} but table {t.name!r} is at "
                               f"{cur.save_id if cur else 'no save'} on cursor {cursor!r}; load in order")
            _apply_delta(t, delta, tomb)
            # Other cursors' next deltas must carry these evictions too.
            t._tomb_keys = np.concatenate([t._tomb_keys, tomb])
            t._tomb_epochs = np.concatenate([t._tomb_epochs, tomb_ep])
        from tables.sparse_table import Cursor

        t._admission = admission
        t.config = adopted
        t._pass = pass_
        t._epoch = epoch + 1
        t.counters.update(counters)
        for c, (ep, sid) in cursors.items():
            t._cursors.setdefault(c, Cursor(ep, sid))
        t._cursors[cursor] = Cursor(epoch, save_id)
        _prune_tombstones(t)
    return man


def _apply_delta(t: SparseTable, delta: dict[str, np.ndarray], tomb: np.ndarray) -> None:
    """Under the lock: remove tombstoned ids, then upsert the delta's rows."""
    if tomb.shape[0]:
        rows = np.empty(tomb.shape[0], np.int64)
        hashmap.lookup(t._slots, t._rows.cols["keys"], tomb, rows)
        mask = np.zeros(t._rows.n, np.bool_)
        mask[rows[rows >= 0]] = True
        if mask.any():
            t._remove(mask)
    keys = delta["keys"]
    rows = np.empty(keys.shape[0], np.int64)
    hashmap.lookup(t._slots, t._rows.cols["keys"], keys, rows)
    new = rows < 0
    n0, m = t._rows.n, int(new.sum())
    t._reserve(n0 + m)
    rows[new] = np.arange(n0, n0 + m)
    for name, col in t._rows.cols.items():
        col[rows] = delta[name]
    t._rows.n = n0 + m
    hashmap.insert(t._slots, t._rows.cols["keys"], rows[new])
