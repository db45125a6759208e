"""Admission sketches are sized against the machine's memory before they are allocated: one
over the table's share is refused, from its config or from a runtime policy change, with an
error naming the keys and the limit, and the table goes on as it was."""

from __future__ import annotations

import numpy as np
import pytest

from core.errors import ConfigError
from tables.admission import check_sketch_memory, memory_bytes_available, sketch_bytes
from tables.sparse_table import SparseTable
from tables.table_config import AlwaysAdmission, CountAdmission, ScoreAdmission, TableConfig

HUGE = {"policy": "score", "sketch_width": 1 << 30, "sketch_depth": 16}  # 128 GiB: the largest the config allows


def test_sketch_bytes_count_every_sketch_before_allocating() -> None:
    assert sketch_bytes(AlwaysAdmission()) == 0
    assert sketch_bytes(CountAdmission(sketch_width=4096, sketch_depth=4)) == 4096 * 4 * 4
    assert sketch_bytes(ScoreAdmission(sketch_width=4096, sketch_depth=4)) == 2 * 4096 * 4 * 4  # shows and clicks
    assert sketch_bytes(ScoreAdmission.model_validate(HUGE)) == 1 << 37


def test_the_limit_is_a_share_of_the_machines_memory() -> None:
    memory = memory_bytes_available()
    assert memory > 1 << 26
    cfg = CountAdmission(sketch_width=1 << 16, sketch_depth=4)  # 1 MiB
    need = sketch_bytes(cfg)
    check_sketch_memory(cfg, table="t", share=min(1.0, 2 * need / memory))  # within: no error
    with pytest.raises(ConfigError) as err:
        check_sketch_memory(cfg, table="t", share=(need - 4096) / memory)
    assert err.value.detail["keys"] == ["admission.sketch_width", "admission.sketch_depth"]
    assert err.value.detail["sketch_bytes"] == need and err.value.detail["limit_bytes"] < need
    assert f"over the limit of {err.value.detail['limit_bytes']} bytes" in err.value.message


def test_a_runtime_sketch_over_the_limit_is_refused_and_changes_nothing() -> None:
    t = SparseTable(TableConfig(name="t", dim=4, admission=CountAdmission(min_count=2, sketch_width=4096)),
                    sketch_share=0.01)  # 128 GiB is over it on any machine under 12 TiB
    keys = np.arange(1, 101, dtype=np.uint64)
    t.push(keys, np.zeros((100, 4), np.float32))
    before, pending = t.config, t.stats()["pending_estimate"]
    for ask in (t.policy_config, t.set_policy):  # the dry run refuses as the change does
        with pytest.raises(ConfigError, match=r"sketch_width 1073741824 x admission\.sketch_depth 16") as err:
            ask(admission=HUGE)
        assert "over the limit of" in err.value.message and err.value.detail["table"] == "t"
    assert t.config == before and t.stats()["pending_estimate"] == pending == 100
    assert t.stats()["admission_bytes"] == 4096 * 4 * 4, "no sketch was allocated"
    t.push(keys, np.zeros((100, 4), np.float32))
    assert t.size() == 100, "the table goes on under its old policy"
    t.set_policy(admission={"policy": "score", "sketch_width": 8192})  # a sane one is taken
    assert t.stats()["admission_bytes"] == 2 * 8192 * 4 * 4


def test_a_configured_sketch_over_the_limit_is_refused_at_start() -> None:
    cfg = TableConfig(name="big", dim=4, admission=CountAdmission(sketch_width=1 << 16, sketch_depth=4))
    with pytest.raises(ConfigError, match=r"table big: admission\.sketch_width 65536") as err:
        SparseTable(cfg, sketch_share=1e-9)
    assert err.value.detail["limit_bytes"] < sketch_bytes(cfg.admission)
    assert SparseTable(cfg).stats()["admission_bytes"] == sketch_bytes(cfg.admission)
