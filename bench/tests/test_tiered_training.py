"""bench.tiered_training on a few thousand rows: the tiered table learns exactly what the all-RAM
table learns (the same test AUC), the evicting one loses rows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench import tiered_tables, tiered_training


def here(fn: Any, *args: Any) -> Any:
    return fn(*args)


def one_after_another(fn: Any, *runs: tuple[Any, ...]) -> list[Any]:
    return [fn(*args) for args in runs]


def test_the_tiered_run_matches_the_all_ram_run_and_the_evicting_one_evicts(tmp_path: Path) -> None:
    r = tiered_training.run(4000, 1000, 4, 3000, 256, tmp_path, here, one_after_another)
    assert r["tiered"]["disk_rows"] > 0 and r["tiered"]["rows"] == r["all_ram"]["rows"]
    assert r["tiered"]["auc"] == r["all_ram"]["auc"]
    assert r["evicting"]["evicted"] > 0 and r["evicting"]["rows"] < r["all_ram"]["rows"]
    tiered_training.report(r)


def test_the_wide_and_deep_variant_learns_the_same_on_every_tier_and_refuses_bad_sizes(tmp_path: Path) -> None:
    r = tiered_training.run(3000, 800, 4, 2000, 256, tmp_path, here, one_after_another, mlp=(16, 8))
    assert r["mlp"] == [16, 8] and r["tiered"]["disk_rows"] > 0
    assert r["tiered"]["auc"] == r["all_ram"]["auc"] > 0.5
    tiered_training.report(r)
    for bad in ("abc", "400,0", ""):
        with pytest.raises(SystemExit):
            tiered_tables.main(["--train", "--mlp", bad])
