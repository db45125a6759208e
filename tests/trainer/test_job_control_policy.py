"""GET/PUT of a table's admission and eviction policy through the job-control handler, on
real shard processes: dry runs count without changing anything, bad settings change no
shard, applied settings take effect on every shard."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from core.errors import InvalidInput, NotFound
from models import build_model
from ps.cluster import ClusterSpec
from tests.models.helpers import small_config
from tests.ps.ps_harness import shard_processes
from trainer.job_control import JobControl

pytestmark = pytest.mark.process


def test_policy_get_dry_run_apply_and_refuse(tmp_path: Path) -> None:
    model = build_model(small_config("wide_deep"))
    table = model.tables[0]
    with shard_processes(tmp_path, [table.model_dump(mode="json")], n=2) as shards:
        job = SimpleNamespace(model=model, spec=ClusterSpec(role="worker", shard_endpoints=tuple(shards.endpoints)))
        control = JobControl(job)
        with shards.client() as ps:
            keys = np.arange(1, 1001, dtype=np.uint64)
            ps.wait(ps.push(table.name, keys, np.zeros((1000, table.width), np.float32)))
            ps.admin.end_pass()
            ps.admin.end_pass()
            ps.wait(ps.push(table.name, keys[:300], np.zeros((300, table.width), np.float32)))
        got = control.get_policy(table.name)
        assert got["eviction"] == table.eviction.model_dump() and got["rows"] == 1000
        dry = control.put_policy(table.name, None, {"ttl_passes": 1}, True)
        assert dry["would_evict"] == 700 and not dry["applied"], "700 rows were last seen 2 passes ago"
        assert control.get_policy(table.name)["eviction"]["ttl_passes"] is None, "a dry run changes nothing"
        with pytest.raises(InvalidInput, match="ttl"):
            control.put_policy(table.name, None, {"ttl": 1}, False)
        with pytest.raises(NotFound):
            control.get_policy("no_such_table")
        done = control.put_policy(table.name, {"policy": "count", "min_count": 2, "sketch_width": 4096},
                                  {"ttl_passes": 1}, False)
        assert done["applied"] and done["admission"]["min_count"] == 2
        with shards.client() as ps:
            parts = ps.admin.policy(table.name)
            assert all(p["eviction"]["ttl_passes"] == 1 and p["admission"]["policy"] == "count" for p in parts)
            evicted = sum(sum(e["evicted"].values()) for e in ps.admin.shrink())
            assert evicted == 700
            fresh = np.arange(5000, 5100, dtype=np.uint64)  # new ids now need two sightings
            ps.wait(ps.push(table.name, fresh, np.zeros((100, table.width), np.float32)))
            assert sum(s["tables"][table.name]["rows"] for s in ps.admin.stats()) == 300
