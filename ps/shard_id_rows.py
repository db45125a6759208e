"""A shard's id-rows tables (:mod:`tables.id_rows_table`) and their two ops.

``ID_ROWS_WRITE`` (meta ``{mode: append|put, words, ttl_passes?}``; arrays ``[keys, ids,
time_bits]`` to append, ``[keys, values]`` to put) and ``ID_ROWS_READ`` (meta ``{words}``;
arrays ``[keys]``; reply ``[rows uint64 (n, words), found uint8]``). A table is made by its
first write, with the layout the write names (later writes must name the same), and lives in
the shard's sparse tables from then on: every save, load, shrink and pass end sees it. A shard
restoring a save makes the id-rows tables the save holds before loading them (:func:`adopt_saved`).
A read of a table no write made yet reads zeros (no ids), as a read of an absent key does.

``RATES`` (meta ``{alpha}``; arrays ``[observed keys, asked keys]``; reply ``[float32 rate per
asked key]``) counts one step of a rate table (:meth:`tables.id_rows_table.IdRowsTable.observe_rates`,
made by its first request) and answers the asked keys' expected occurrences per step. Every
worker sends one to every shard each step, so each shard's clock counts the job's steps. A
resend of a request already applied (:mod:`ps.replay_cache`) is answered without counting again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from core.atomic_files import read_json
from core.errors import Conflict, CorruptData, InvalidInput
from ps.protocol import Message, check_keys
from ps.shard_requests import arrays_of, ok
from ps.shard_tables import ShardTables
from tables.id_rows_table import MAX_WORDS, RATE_WORDS, IdRowsTable, is_id_rows


class ShardIdRows:
    def __init__(self, tables: ShardTables) -> None:
        self.tables = tables

    def write(self, msg: Message) -> Message:
        words, mode = _words(msg), msg.meta.get("mode")
        ttl = msg.meta.get("ttl_passes")
        if ttl is not None and (not isinstance(ttl, int) or isinstance(ttl, bool) or ttl < 0):
            raise InvalidInput(f"id-rows {msg.table!r}: ttl_passes must be a non-negative integer or null")
        table = self._table(msg.table, words, ttl)
        if mode == "append":
            keys, ids, time_bits = arrays_of(msg, 3)
            table.append(check_keys(keys), ids, time_bits)
        elif mode == "put":
            keys, values = arrays_of(msg, 2)
            table.put(check_keys(keys), values)
        else:
            raise InvalidInput(f"id-rows {msg.table!r}: mode must be 'append' or 'put', got {mode!r}")
        return ok(msg)

    def read(self, msg: Message) -> Message:
        words = _words(msg)
        (keys,) = arrays_of(msg, 1)
        keys = check_keys(keys)
        table = self.tables.sparse.get(msg.table)
        if table is None:
            _check_name(msg.table)
            return ok(msg, np.zeros((keys.shape[0], words), np.uint64), np.zeros(keys.shape[0], np.uint8))
        rows, found = _id_rows(table, words).read(keys)
        return ok(msg, rows, found.view(np.uint8))

    def rates(self, msg: Message, *, observe: bool = True) -> Message:
        alpha = msg.meta.get("alpha")
        if not isinstance(alpha, float | int) or isinstance(alpha, bool):
            raise InvalidInput(f"rates {msg.table!r}: meta 'alpha' must be a number in (0, 1]")
        observed, asked = arrays_of(msg, 2)
        table = self._table(msg.table, RATE_WORDS, None)
        return ok(msg, table.observe_rates(check_keys(observed), check_keys(asked), float(alpha), observe=observe))

    def _table(self, name: str, words: int, ttl_passes: int | None) -> IdRowsTable:
        table = self.tables.sparse.get(name)
        if table is None:
            _check_name(name)
            table = self.tables.add_id_rows(name, words, ttl_passes=ttl_passes)  # its share of the byte budget too
        return _id_rows(table, words)


def _words(msg: Message) -> int:
    words = msg.meta.get("words")
    if not isinstance(words, int) or isinstance(words, bool) or not 1 <= words <= MAX_WORDS:
        raise InvalidInput(f"id-rows {msg.table!r}: meta 'words' must be an integer in 1..{MAX_WORDS}")
    return words


def _check_name(name: str) -> None:
    if not is_id_rows(name):
        raise InvalidInput(f"{name!r} is not an id-rows table name (they start with 'ids.')")


def _id_rows(table: Any, words: int) -> IdRowsTable:
    """``table`` as the id-rows table of ``words`` words a row that a request names; Conflict if it is not."""
    if not isinstance(table, IdRowsTable) or table.words != words:
        held = f"{table.words} words a row" if isinstance(table, IdRowsTable) else "embeddings"
        raise Conflict(f"table {table.name!r} holds {held}; a request for {words} words a row refused")
    return table


def adopt_saved(tables: ShardTables, plan: list[tuple[Path, dict[str, Any]]]) -> None:
    """Before a restore replays ``plan`` ((save dir, shard save manifest), oldest first): make
    each id-rows table a save of it holds and the shard does not, with the saved layout."""
    for save_dir, man in plan:
        for name in man["sparse"]:
            if not is_id_rows(name) or name in tables.sparse:
                continue
            mpath = save_dir / "sparse" / name / f"{name}.manifest.json"
            try:
                dim = int(read_json(mpath)["layout"]["dim"])
            except (KeyError, TypeError, ValueError) as exc:
                raise CorruptData(f"{mpath}: no layout dim ({exc!r})", detail={"file": str(mpath)}) from None
            tables.add_id_rows(name, dim // 2)
