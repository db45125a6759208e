"""The POLICY op on a shard: read a table's admission/eviction policy, count what an eviction
policy would evict (dry run), or apply new settings."""

from __future__ import annotations

from typing import Any

from core.errors import ConfigError, InvalidInput
from tables.sparse_table import SparseTable
from tables.table_config import TableConfig


def policy_reply(table: SparseTable, meta: dict[str, Any]) -> dict[str, Any]:
    """``meta``: optional ``admission``/``eviction`` settings and ``dry_run``."""
    admission, eviction = meta.get("admission"), meta.get("eviction")
    changing = admission is not None or eviction is not None
    if changing:
        cfg = _policy_config(table, admission, eviction)
        if not meta.get("dry_run", False):
            table.set_policy(admission=admission, eviction=eviction)
        would = table.shrink(policy=cfg.eviction, dry_run=True)
    else:
        cfg = table.config
        would = table.shrink(dry_run=True)
    return {"table": table.name, "admission": cfg.admission.model_dump(), "eviction": cfg.eviction.model_dump(),
            "would_evict": int(would), "rows": table.size(),
            "applied": bool(changing and not meta.get("dry_run", False))}


def _policy_config(table: SparseTable, admission: Any, eviction: Any) -> TableConfig:
    try:
        return table.policy_config(admission=admission, eviction=eviction)
    except ConfigError as err:  # a request, not a config file: 422 like any bad input
        raise InvalidInput(err.message, detail=err.detail) from None
