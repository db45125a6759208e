"""bench/tier_restore.py end to end on a small save: both loads hold every row, the tiered one
split between its tiers with its table within the budget."""

from __future__ import annotations

import pytest

from bench.tier_restore import run

pytestmark = pytest.mark.process


def test_both_loads_hold_every_row_and_the_tiered_table_stays_within_its_budget() -> None:
    r = run(40_000)
    tiered, all_ram = r["tiered"], r["all_ram"]
    assert tiered["ram_rows"] + tiered["disk_rows"] == all_ram["ram_rows"] == r["rows"]
    assert tiered["disk_rows"] > tiered["ram_rows"] > 0 and all_ram["disk_rows"] == 0
    assert tiered["table_mib"] <= r["budget_mib"] < all_ram["table_mib"]
    assert tiered["peak_anon_mib"] >= 0 and all_ram["peak_anon_mib"] > 0
