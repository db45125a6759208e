"""The POLICY op on a shard: read a table's admission/eviction policy, count what an eviction
policy would evict (dry run), or apply new settings; and how long an applied change lasts.

A change made at runtime lasts until the table's policy in the PS YAML changes. Saves record
it, but a restore puts back the policy of the save it reads, which may be older than the
change (a rollback, or a restart before the next save), so the shard keeps its runtime
changes (:class:`RuntimePolicies`) and applies them again after every restore; with a
checkpoint dir they are also written there, so a restarted shard applies them at start. Each
is kept with the YAML policy it was made over: a shard started with a YAML whose policy for
that table differs (a redeploy) drops it, and the YAML's policy is in force.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from core.atomic_files import read_json, write_json
from core.errors import ConfigError, CorruptData, InvalidInput
from tables.sparse_table import SparseTable
from tables.table_config import TableConfig
from tables.table_files import policy_of

log = logging.getLogger(__name__)

POLICY_FILE = "runtime-policy.json"  # in the shard's managed checkpoint dir
LASTS = ("until this table's admission or eviction in the YAML (the root YAML's `ps.tables`, rendered into the "
         "shards' ps.yaml) changes: saves, restores, rollbacks and shard restarts keep it; a redeploy whose YAML "
         "changed them puts the YAML's in force")


def policy_reply(table: SparseTable, meta: dict[str, Any], runtime: RuntimePolicies | None = None) -> dict[str, Any]:
    """``meta``: optional ``admission``/``eviction`` settings and ``dry_run``; an applied change
    is recorded in ``runtime``."""
    admission, eviction = meta.get("admission"), meta.get("eviction")
    changing = admission is not None or eviction is not None
    applied = changing and not meta.get("dry_run", False)
    if changing:
        cfg = _policy_config(table, admission, eviction)
        if applied:
            table.set_policy(admission=admission, eviction=eviction)
            if runtime is not None:
                runtime.record(table)
        would = table.shrink(policy=cfg.eviction, dry_run=True)
    else:
        cfg = table.config
        would = table.shrink(dry_run=True)
    return {"table": table.name, "admission": cfg.admission.model_dump(), "eviction": cfg.eviction.model_dump(),
            "nonfinite": cfg.nonfinite, "show_click_decay": cfg.show_click_decay,
            "source": policy_source(table.configured, cfg),
            "would_evict": int(would), "rows": table.size(), "applied": bool(applied),
            **({"lasts": LASTS} if applied else {})}


def policy_source(configured: TableConfig, config: TableConfig) -> dict[str, str]:
    """Where each policy section in force came from: the YAML the shard started with, or a runtime change."""
    return {k: "yaml" if getattr(config, k) == getattr(configured, k) else "runtime"
            for k in ("admission", "eviction", "nonfinite", "show_click_decay")}


def _policy_config(table: SparseTable, admission: Any, eviction: Any) -> TableConfig:
    try:
        return table.policy_config(admission=admission, eviction=eviction)
    except ConfigError as err:  # a request, not a config file: 422 like any bad input
        raise InvalidInput(err.message, detail=err.detail) from None


def _same_policy(config: TableConfig, policy: Mapping[str, Any]) -> bool:
    """Whether ``policy`` (admission and eviction as dumped) is ``config``'s, defaults filled in."""
    other = TableConfig.model_validate({**config.model_dump(), **policy})
    return (other.admission, other.eviction) == (config.admission, config.eviction)


class RuntimePolicies:
    """The policies applied at runtime on one shard's tables, each with the YAML policy it was
    made over (module docstring); written to ``path`` (None: kept in memory only)."""

    def __init__(self, tables: Mapping[str, SparseTable], path: Path | None) -> None:
        self._path = path
        self._changes: dict[str, dict[str, Any]] = {}
        if path is None or not path.exists():
            return
        try:
            saved = read_json(path)
        except CorruptData as err:  # the YAML's policy then, not a shard that cannot start
            log.warning("runtime policies not applied: %s", err.message)
            return
        for name, change in saved.items():
            table = tables.get(name)
            try:
                kept = table is not None and _same_policy(table.configured, change["yaml"])
                change = {"yaml": change["yaml"], "policy": {k: change["policy"][k] for k in ("admission", "eviction")}}
            except (KeyError, TypeError, ValueError) as exc:
                log.warning("runtime policy of table %s in %s not applied: %r", name, path, exc)
                continue
            if kept:
                self._changes[name] = change
            else:
                log.info("runtime policy of table %s dropped: %s", name,
                         "no such table" if table is None else "the YAML's policy for it changed")
        if len(self._changes) != len(saved):
            self._write()

    def record(self, table: SparseTable) -> None:
        """After a change was applied to ``table``: its policy now lasts (none once it is the YAML's again)."""
        if _same_policy(table.configured, policy_of(table.config)):
            self._changes.pop(table.name, None)
        else:
            self._changes[table.name] = {"yaml": policy_of(table.configured), "policy": policy_of(table.config)}
        self._write()

    def reapply(self, tables: Mapping[str, SparseTable]) -> None:
        """After a restore (which adopted each save's policy): the runtime changes are in force again."""
        for name, change in self._changes.items():
            table = tables.get(name)
            if table is None or _same_policy(table.config, change["policy"]):
                continue
            try:
                table.set_policy(**change["policy"])
            except ConfigError as err:  # e.g. a budget the restored table's sketches leave no row in
                log.warning("runtime policy of table %s not applied after the restore: %s", name, err.message)

    def _write(self) -> None:
        if self._path is not None:
            self._path.parent.mkdir(parents=True, exist_ok=True)
            write_json(self._path, self._changes)
