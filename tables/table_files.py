"""Saving and loading a sparse table (base and delta) through checkpoint files.

Files in the save directory, per table ``<name>``:
  ``<name>.rows``        rows in chunks of ``chunk_rows``; each chunk holds every column's
                         raw bytes for those rows, columns in manifest order;
  ``<name>.tombstones``  array container: ids evicted since the cursor's previous save and
                         their epochs (a base keeps every tombstone another cursor may still
                         need, so a table restored from it can write that cursor's deltas);
  ``<name>.state``       array container: admission state (sketches, counters) and, from
                         table format 2 on, ``hash_key``: the index's secret slot-hash key,
                         so a loaded base rebuilds the very same index layout;
  ``<name>.manifest.json`` written last: layout, chain (save id, parent id, epochs),
                         counters, and size + CRC-32C of each file.
Table formats (``format`` in the manifest): 1 = no hash key (a base loaded from it gets a
fresh key), 2 = ``hash_key`` required in the state file. Newer formats are refused. A delta
applies to the table its chain's base was loaded into, so its own copy of the key is unused.
A save is two steps (:class:`TableSave`): the consistent point, taken under the table lock
(a copy-on-write snapshot, :mod:`tables.snapshot`: microseconds for a base, one pass over
a column to pick a delta's changed rows), then the writing, during which pushes go on. A
PS shard replies to a detached save between the two. A load verifies every file first (the
rows file a block at a time), then applies it under the table's lock, reading the rows a
chunk at a time: an all-RAM table's are decoded before the swap, a tiered table's placed as
they come (RAM up to its budget, the rest on disk), so a save larger than the RAM budget is
never whole in RAM. Both see the table only through :class:`StoredTable` (its config,
counters, state and lock).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
from pydantic import ValidationError

from core.atomic_files import (
    AtomicWriter,
    decode_arrays,
    encode_arrays,
    entry_file,
    read_json,
    read_verified,
    write_bytes,
    write_json,
)
from core.errors import Conflict, CorruptData, InvalidInput
from tables import hashmap
from tables.admission import Admission, make_admission
from tables.rows import MOVE_CHUNK, RowStore
from tables.snapshot import RowSnapshot
from tables.table_config import TableConfig
from tables.table_lock import TableLock
from tables.table_state import Cursor, TableState

if TYPE_CHECKING:
    from tables.tiering import TableTier

CHUNK_ROWS = 1 << 16
VERIFY_BLOCK = 1 << 22  # bytes a load's checksum pass reads at a time
TABLE_FORMAT = 2  # what saves write
READABLE_FORMATS = (1, 2)  # 1: before the keyed index (no hash_key)


class StoredTable(Protocol):
    """What a save reads and a load rebuilds (:class:`tables.sparse_table.SparseTable` is one)."""

    name: str
    config: TableConfig
    configured: TableConfig  # the config it was built with (the YAML's), before any runtime policy change
    counters: dict[str, int]
    state: TableState
    lock: TableLock
    tier: TableTier | None  # the disk tier, whose rows a save writes after the RAM tier's


def _layout(config: TableConfig, rows: RowStore) -> dict[str, Any]:
    layout = {
        "dim": config.dim, "wide": config.wide, "width": config.width,
        "optimizer": config.optimizer.kind, "wide_optimizer": config.wide_optimizer.kind if config.wide else None,
        "columns": {name: [c.dtype.str, *c.shape[1:]] for name, c in rows.cols.items()},
        # Seed and initializers decide what never-seen ids read as: a restore must keep them.
        "seed": config.seed, "initializer": config.initializer.model_dump(),
        "wide_initializer": config.wide_initializer.model_dump() if config.wide else None,
    }
    opt = config.optimizer
    if opt.kind == "adagrad" and opt.accumulator == "element":
        # Only when set, so saves of row-wise tables (all saves before the option) still match.
        layout["accumulator"] = "element"
    return layout


def policy_of(config: TableConfig) -> dict[str, Any]:
    """The effective admission and eviction settings (``set_policy`` may have changed them)."""
    return {"admission": config.admission.model_dump(), "eviction": config.eviction.model_dump()}


class TableSave:
    """A save whose consistent point is taken (``SparseTable.begin_save``); :meth:`write` writes it.

    Holds the table's ``one_save`` lock from the consistent point until :meth:`write` or
    :meth:`abort` returns, so exactly one of them must be called (once)."""

    def __init__(self, t: StoredTable, path: Path, *, mode: str, cursor: str) -> None:
        if mode not in ("base", "delta"):
            raise InvalidInput(f"table {t.name}: save mode must be 'base' or 'delta', got {mode!r}")
        self.table, self.path, self.mode, self.cursor = t, path, mode, cursor
        t.lock.one_save.acquire()
        try:
            with t.lock.mutex:
                self._take(t.state)
        except BaseException:
            t.lock.one_save.release()
            raise

    def _take(self, st: TableState) -> None:
        """Under the table lock: everything the save holds is as of this instant."""
        t = self.table
        prev = st.cursors.get(self.cursor)
        if self.mode == "delta" and prev is None:
            raise Conflict(f"table {t.name}: no base saved on cursor '{self.cursor}' yet; save a base first")
        self.prev, self.epoch = prev, st.epoch
        st.epoch += 1
        self.since = prev.epoch if prev is not None and self.mode == "delta" else 0
        self.admission_state = {k: v.copy() for k, v in st.admission.state().items()}
        self.admission_state["hash_key"] = st.hash_key.copy()
        self.head = {"pass": st.pass_id, "counters": dict(t.counters), "policy": policy_of(t.config),
                     "configured_policy": policy_of(t.configured),
                     "cursors": {c: [v.epoch, v.save_id] for c, v in st.cursors.items()}}
        self.layout = _layout(t.config, st.rows)
        n = st.rows.n
        only = None if self.mode == "base" else st.rows.cols["mod_epoch"][:n] > self.since
        self.snap: RowSnapshot | None = RowSnapshot(st.rows, CHUNK_ROWS, only=only)
        t.lock.open_snapshot(self.snap)
        self.disk_records = np.empty(0, np.int64)  # the disk tier's rows this save holds
        if t.tier is not None:
            disk = t.tier.disk
            self.disk_records = disk.live_records()  # a delta keeps the changed ones as it reads them
            disk.hold()
        if self.mode == "base":
            self.tomb, self.tomb_ep = st.tomb_keys.copy(), st.tomb_epochs.copy()
        else:
            self.tomb, self.tomb_ep = st.tombstones_after(self.since)

    def _end_snapshot(self) -> None:
        if self.snap is not None:
            self.table.lock.close_snapshot()
            self.snap = None
            if self.table.tier is not None:
                with self.table.lock.mutex:
                    self.table.tier.disk.release()
                    self.table.tier.settle()  # what RAM took past its budget during the save

    def abort(self) -> None:
        """Give the consistent point up without writing (pushes stop keeping pre-images)."""
        try:
            self._end_snapshot()
        finally:
            self.table.lock.one_save.release()

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
                with t.lock.mutex:
                    chunk = self.snap.next_chunk(t.state.rows)
                chunks.add(chunk)  # written outside the lock: pushes go on meanwhile
            for start in range(0, self.disk_records.shape[0], CHUNK_ROWS):
                assert t.tier is not None
                with t.lock.mutex:  # held records are not reused while the snapshot is open
                    chunk = t.tier.disk.read(self.disk_records[start : start + CHUNK_ROWS])
                if self.mode == "delta":
                    changed = chunk["mod_epoch"] > self.since
                    chunk = {name: col[changed] for name, col in chunk.items()}
                chunks.add(chunk)
            n_rows = chunks.close()
            rows_entry = w.commit()
        self._end_snapshot()
        files = {
            "rows": rows_entry,
            "tombstones": write_bytes(path / f"{t.name}.tombstones",
                                      encode_arrays({"keys": self.tomb, "epochs": self.tomb_ep})),
            "state": write_bytes(path / f"{t.name}.state", encode_arrays(self.admission_state)),
        }
        manifest = {
            "format": TABLE_FORMAT, "table": t.name, "mode": self.mode, "cursor": self.cursor, "save_id": save_id,
            "parent_id": self.prev.save_id if self.prev is not None and self.mode == "delta" else None,
            "epoch": self.epoch, "since_epoch": self.since, "rows": n_rows, "tombstones": int(self.tomb.shape[0]),
            "chunk_rows": CHUNK_ROWS, "layout": self.layout, "files": files, "created_at": time.time(), **self.head,
        }
        write_json(path / f"{t.name}.manifest.json", manifest)
        with t.lock.mutex:
            t.state.cursors[self.cursor] = Cursor(self.epoch, save_id)
            t.state.prune_tombstones()
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


class _RowsFile:
    """A rows file, verified (size and CRC-32C) by reading it a block at a time, then read back
    a chunk at a time: a load holds one chunk's bytes, never the file's."""

    def __init__(self, directory: Path, entry: dict[str, Any], man: dict[str, Any],
                 columns: dict[str, np.ndarray]) -> None:
        import crc32c  # as core.atomic_files: only processes that read files load it

        name, size, crc = entry_file(directory, entry)
        self.path = directory / name
        self.n, self.chunk = int(man["rows"]), int(man["chunk_rows"])
        self.columns = {k: (c.dtype, c.shape[1:]) for k, c in columns.items()}
        self.row_bytes = sum(c.dtype.itemsize * (c.shape[1] if c.ndim == 2 else 1) for c in columns.values())
        try:
            self._f = open(self.path, "rb")  # noqa: SIM115 - kept open: the chunks are read from the file verified
        except FileNotFoundError:
            raise CorruptData(f"{self.path}: file missing", detail={"file": str(self.path)}) from None
        try:
            seen, got = 0, 0
            while block := self._f.read(VERIFY_BLOCK):
                seen += len(block)
                got = crc32c.crc32c(block, got)
            if seen != size:
                raise CorruptData(f"{self.path}: size {seen} bytes, manifest says {size} (truncated or overwritten)",
                                  detail={"file": str(self.path)})
            if got != crc:
                raise CorruptData(f"{self.path}: checksum mismatch (corrupted)", detail={"file": str(self.path)})
            if size != self.n * self.row_bytes or self.chunk <= 0:
                raise CorruptData(f"{self.path}: holds {size} bytes, expected {self.n} rows x {self.row_bytes} bytes")
        except BaseException:
            self._f.close()
            raise

    def chunks(self) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
        """``(first row, columns)`` of ``MOVE_CHUNK`` rows at a time, in file order (each
        column's part read straight into an array of its own); closes the file at the end."""
        try:
            for a in range(0, self.n, self.chunk):
                m = min(self.chunk, self.n - a)
                for s in range(0, m, MOVE_CHUNK):
                    k = min(MOVE_CHUNK, m - s)
                    off, cols = a * self.row_bytes, {}
                    for name, (dtype, tail) in self.columns.items():
                        col_row = dtype.itemsize * (tail[0] if tail else 1)
                        cols[name] = col = np.empty((k, *tail), dtype)
                        self._f.seek(off + s * col_row)
                        if col.nbytes and self._f.readinto(col.reshape(-1).view(np.uint8)) != col.nbytes:
                            raise CorruptData(f"{self.path}: shorter than when it was verified",
                                              detail={"file": str(self.path)})
                        off += m * col_row
                    yield a + s, cols
        finally:
            self._f.close()

    def close(self) -> None:
        self._f.close()


@dataclass
class _Saved:
    """The manifest fields a load applies, parsed before anything changes: once the table is
    being changed under the lock, a missing or mistyped field must not leave it half-loaded."""

    manifest: dict[str, Any]
    format: int
    mode: str
    rows: int
    cursor: str
    save_id: str
    parent_id: Any
    epoch: int
    pass_id: int
    counters: dict[str, int]
    cursors: dict[str, tuple[int, str]]
    policy: dict[str, dict[str, Any]]
    configured_policy: dict[str, dict[str, Any]] | None  # None: a save from before it was recorded
    files: dict[str, dict[str, Any]]


def _read_manifest(t: StoredTable, mpath: Path) -> _Saved:
    man = read_json(mpath)
    try:
        mode, n_rows = man["mode"], int(man["rows"])
        if man["format"] not in READABLE_FORMATS or man["table"] != t.name or mode not in ("base", "delta"):
            raise CorruptData(f"{mpath}: format {man['format']}, table {man['table']!r}, mode {mode!r} "
                              f"not loadable into table {t.name!r} (formats {list(READABLE_FORMATS)})")
        files = {k: man["files"][k] for k in ("rows", "tombstones", "state")}
        if not all(isinstance(e, dict) and {"file", "bytes", "crc32c"} <= e.keys() for e in files.values()):
            raise TypeError("each file entry needs 'file', 'bytes' and 'crc32c'")
        return _Saved(
            manifest=man, format=int(man["format"]), mode=mode, rows=n_rows, cursor=str(man["cursor"]),
            save_id=str(man["save_id"]),
            parent_id=man["parent_id"], epoch=int(man["epoch"]), pass_id=int(man["pass"]),
            counters={k: int(v) for k, v in man.get("counters", {}).items() if k in t.counters},
            cursors={str(c): (int(ep), str(sid)) for c, (ep, sid) in man.get("cursors", {}).items()},
            policy=_policy_fields(man["policy"]),
            configured_policy=_policy_fields(man["configured_policy"]) if "configured_policy" in man else None,
            files=files)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise CorruptData(f"{mpath}: malformed manifest ({exc!r})") from None


def _policy_fields(policy: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {"admission": dict(policy["admission"]), "eviction": dict(policy["eviction"])}


def _adopted_config(t: StoredTable, saved: _Saved, mpath: Path) -> TableConfig:
    """A restore continues the same job: it adopts the policy in force when the save was made
    (PUT /admin/tables/{name}/policy may have changed it since the YAML was written), unless
    the table's own config changed its policy since that save: a redeployed YAML is in force."""
    try:
        if saved.configured_policy is not None:
            was = TableConfig.model_validate({**t.configured.model_dump(), **saved.configured_policy})
            if (was.admission, was.eviction) != (t.configured.admission, t.configured.eviction):
                return TableConfig.model_validate({**t.config.model_dump(), **policy_of(t.configured)})
        return TableConfig.model_validate({**t.config.model_dump(), **saved.policy})
    except ValidationError as exc:
        raise CorruptData(f"{mpath}: saved admission/eviction policy is invalid ({exc.errors()[0]['msg']})") from None


def _check_layout(t: StoredTable, saved: _Saved, mpath: Path) -> None:
    layout = _layout(t.config, t.state.rows)
    if saved.manifest.get("layout") != layout:
        saved_layout = saved.manifest.get("layout") or {}
        diff = sorted(k for k in {*layout, *saved_layout} if saved_layout.get(k) != layout.get(k))
        raise Conflict(f"{mpath}: saved layout differs from table {t.name!r} config in {diff}",
                       detail={"fields": diff})


def _decode_tombstones(buf: memoryview, source: str) -> tuple[np.ndarray, np.ndarray]:
    arrays = decode_arrays(buf, source)
    keys, epochs = arrays.get("keys"), arrays.get("epochs")
    if keys is None or epochs is None or keys.dtype != np.uint64 or epochs.dtype != np.uint32 \
            or keys.ndim != 1 or epochs.shape != keys.shape:
        raise CorruptData(f"{source}: expected uint64 keys and uint32 epochs of one length", detail={"file": source})
    return keys, epochs


def _decode_state(buf: memoryview, path: Path, source: str, config: TableConfig,
                  table_format: int) -> tuple[Admission, np.ndarray]:
    """The admission policy with its saved state, and the index's hash key (a fresh one for
    a format-1 save, which has none)."""
    state = decode_arrays(buf, source)
    hash_key = state.pop("hash_key", None)
    if table_format >= 2 and (hash_key is None or hash_key.dtype != np.uint64 or hash_key.shape != (2,)):
        raise CorruptData(f"{source}: a format-{table_format} save needs a hash_key of 2 uint64",
                          detail={"file": source})
    admission = make_admission(config.admission, config.seed)
    try:
        admission.load_state(state)
    except (KeyError, ValueError) as exc:
        raise CorruptData(f"{path}: admission state does not fit the table ({exc!r})") from None
    return admission, (hash_key.copy() if hash_key is not None else hashmap.new_hash_key())


def load_table(t: StoredTable, path: Path) -> dict[str, Any]:
    """Verify the save in directory ``path``, then apply it to ``t`` under its lock (see
    ``SparseTable.load``); returns the manifest. A table with a disk tier takes the rows a
    chunk at a time (:func:`_load_tiered`)."""
    mpath = path / f"{t.name}.manifest.json"
    saved = _read_manifest(t, mpath)
    adopted = _adopted_config(t, saved, mpath)
    _check_layout(t, saved, mpath)
    bufs = {k: read_verified(path, e) for k, e in saved.files.items() if k != "rows"}
    source = {k: str(path / e["file"]) for k, e in saved.files.items()}
    tomb, tomb_ep = _decode_tombstones(bufs["tombstones"], source["tombstones"])
    admission, hash_key = _decode_state(bufs["state"], path, source["state"], adopted, saved.format)
    rows = _RowsFile(path, saved.files["rows"], saved.manifest, t.state.rows.cols)
    if t.tier is not None:
        _load_tiered(t, saved, mpath, rows, tomb, tomb_ep, adopted, admission, hash_key)
        return saved.manifest
    n = saved.rows
    if saved.mode == "base":
        store = RowStore(t.state.rows.widths, max(n, t.config.initial_capacity))
        into = store.cols
    else:
        into = {name: np.empty((n, *c.shape[1:]), c.dtype) for name, c in t.state.rows.cols.items()}
    for a, chunk in rows.chunks():
        for name, col in chunk.items():
            into[name][a : a + col.shape[0]] = col
    if saved.mode == "base":
        store.n = n
        base = TableState.indexed(store, hash_key, admission, t.config.initial_capacity)
        base.tomb_keys, base.tomb_epochs = tomb, tomb_ep  # kept for other cursors' deltas, not applied
    with t.lock.mutex:
        t.lock.wait_idle()
        if saved.mode == "base":
            t.state = base
        else:
            _check_chain(t, saved, mpath)
            _apply_delta(t.state, into, tomb, tomb_ep)
        _adopt(t, saved, adopted, admission)
    return saved.manifest


def _load_tiered(t: StoredTable, saved: _Saved, mpath: Path, rows: _RowsFile, tomb: np.ndarray,
                 tomb_ep: np.ndarray, config: TableConfig, admission: Admission, hash_key: np.ndarray) -> None:
    """Under the lock: a save into a table with a disk tier, its rows read a chunk at a time and
    placed by :meth:`TableTier.load_rows` (RAM up to its budget, the coldest rows on disk), so
    RAM never holds a table larger than its budget. A base empties both tiers first; a delta's
    tombstones leave either tier. The saved policy, pass and admission state are adopted
    before the rows come, so the budget and the eviction scores are the save's."""
    tier = t.tier
    assert tier is not None
    with t.lock.mutex:
        t.lock.wait_idle()
        try:
            if saved.mode == "base":
                tier.disk.clear()
                t.state = TableState.indexed(RowStore(t.state.rows.widths, t.config.initial_capacity), hash_key,
                                             admission, t.config.initial_capacity)
                t.state.tomb_keys, t.state.tomb_epochs = tomb, tomb_ep  # kept for other cursors' deltas
            else:
                _check_chain(t, saved, mpath)
                if tomb.shape[0]:
                    t.state.remove_keys(tomb)
                    tier.remove_keys(tomb)
                t.state.add_tombstones(tomb, tomb_ep)
            _adopt(t, saved, config, admission)
            if saved.mode == "base":
                tier.expect_rows(saved.rows)
        except BaseException:
            rows.close()
            raise
        for _, chunk in rows.chunks():
            tier.load_rows(chunk)


def _check_chain(t: StoredTable, saved: _Saved, mpath: Path) -> None:
    """Under the lock: a delta must follow the table's last save on its cursor."""
    cur = t.state.cursors.get(saved.cursor)
    if cur is None or cur.save_id != saved.parent_id:
        raise Conflict(f"{mpath}: delta follows save {saved.parent_id} but table {t.name!r} is at "
                       f"{cur.save_id if cur else 'no save'} on cursor {saved.cursor!r}; load in order")


def _apply_delta(st: TableState, delta: dict[str, np.ndarray], tomb: np.ndarray, tomb_ep: np.ndarray) -> None:
    """Under the lock: remove tombstoned ids, then upsert the delta's rows."""
    if tomb.shape[0]:
        st.remove_keys(tomb)
    st.upsert(delta)
    st.add_tombstones(tomb, tomb_ep)  # other cursors' next deltas must carry these evictions too


def _adopt(t: StoredTable, saved: _Saved, config: TableConfig, admission: Admission) -> None:
    """Under the lock: take the saved policy, admission state, pass, epoch, counters and cursors."""
    st = t.state
    st.admission = admission
    t.config = config
    st.pass_id = saved.pass_id
    st.epoch = saved.epoch + 1
    t.counters.update(saved.counters)
    for c, (ep, sid) in saved.cursors.items():
        st.cursors.setdefault(c, Cursor(ep, sid))
    st.cursors[saved.cursor] = Cursor(saved.epoch, saved.save_id)
    st.prune_tombstones()
