"""Runtime policy changes on real shard processes: an applied change outlasts a reload from an
older checkpoint and a shard restart, and a redeploy with a changed YAML puts the YAML's in
force; an admission sketch over the shard's memory share is refused by the shards and by the
admin API, counted, and changes nothing."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import yaml
from fastapi.testclient import TestClient

from core.errors import InvalidInput
from jobcontrol.channel import ControlServer
from ps.admin import SaveMode
from ps.cluster import ClusterSpec
from ps.shard_policy import LASTS, POLICY_FILE
from service.app import create_app
from tables.table_config import TableConfig
from tests.service.service_support import auth, make_settings
from trainer.job_control import JobControl

from .ps_harness import Shards, shard_processes

pytestmark = pytest.mark.process

EMB = {"name": "emb", "dim": 4, "admission": {"policy": "count", "min_count": 1, "sketch_width": 4096}}
CHANGED = {"max_bytes": 400_000, "over_budget": "refuse"}
HUGE = {"policy": "score", "sketch_width": 1 << 30, "sketch_depth": 16}  # 128 GiB a table a shard


def _evictions(shards: Shards) -> list[dict]:
    with shards.client() as c:
        return [p["eviction"] for p in c.admin.policy("emb")]


def _restart(shards: Shards, which: range) -> None:
    for i in which:
        shards.kill(i)
    for i in which:
        shards.start(i)
    shards.wait_healthy()


def test_a_runtime_change_outlasts_reloads_and_restarts_until_the_yaml_changes(tmp_path: Path) -> None:
    keys = np.arange(1, 2001, dtype=np.uint64)
    with shard_processes(tmp_path, [EMB], n=2) as shards:
        with shards.client() as c:
            c.wait(c.push("emb", keys, np.zeros((2000, 4), np.float32)))
            c.admin.save()  # the checkpoint holds the YAML's policy
            answers = c.admin.apply_policy("emb", eviction=CHANGED)
            assert all(a["applied"] and a["lasts"] == LASTS for a in answers)
            c.admin.load()  # a reload of the checkpoint, older than the change
        assert all(e["max_bytes"] == 400_000 and e["over_budget"] == "refuse" for e in _evictions(shards))
        _restart(shards, range(1))  # shard 0 comes back before any save after the change
        assert all(e["max_bytes"] == 400_000 for e in _evictions(shards)), "a restarted shard keeps it"
        assert all((shards.checkpoints / f"shard-{i:03d}" / POLICY_FILE).is_file() for i in range(2))
        with shards.client() as c:
            c.admin.save(mode=SaveMode.DELTA)  # this save records the change too
            assert sum(s["tables"]["emb"]["rows"] for s in c.admin.stats()) == 2000, "nothing was lost"
        _restart(shards, range(2))  # a redeploy of the same YAML: the change still holds
        assert all(e["max_bytes"] == 400_000 for e in _evictions(shards))

        config = yaml.safe_load(shards.config.read_text())
        config["tables"][0]["eviction"] = {"ttl_passes": 5}
        shards.config.write_text(yaml.safe_dump(config))
        _restart(shards, range(2))  # a redeploy with the YAML's policy changed: the YAML's is in force
        evictions = _evictions(shards)
        assert all(e["max_bytes"] is None and e["ttl_passes"] == 5 and e["over_budget"] == "evict"
                   for e in evictions), evictions
        with shards.client() as c:
            c.admin.load()
            assert all(e["max_bytes"] is None for e in _evictions(shards)), "and stays so after a reload"
            assert sum(s["tables"]["emb"]["rows"] for s in c.admin.stats()) == 2000


def test_an_oversized_sketch_is_refused_by_the_shards_and_the_admin_api(tmp_path: Path) -> None:
    keys = np.arange(1, 501, dtype=np.uint64)
    with shard_processes(tmp_path, [EMB], n=2, shard={"max_sketch_share": 0.01}) as shards:
        with shards.client() as c:
            c.wait(c.push("emb", keys, np.zeros((500, 4), np.float32)))
            with pytest.raises(InvalidInput, match=r"admission\.sketch_width 1073741824 x admission\.sketch_depth 16")\
                    as err:
                c.admin.apply_policy("emb", admission=HUGE)
            assert "over the limit of" in err.value.message and "shard.max_sketch_share 0.01" in err.value.message
            assert [s["errors"] for s in c.admin.stats()] == [{"invalid_input": 1}] * 2, "each shard counted it"
        job = SimpleNamespace(model=SimpleNamespace(tables=[TableConfig.model_validate(EMB)]),
                              spec=ClusterSpec(role="worker", shard_endpoints=tuple(shards.endpoints)))
        server = ControlServer(JobControl(job)).start()
        exports = tmp_path / "exports"
        exports.mkdir()
        try:
            with TestClient(create_app(make_settings(exports, job_control=server.endpoint))) as api:
                r = api.put("/admin/tables/emb/policy", headers=auth(), json={"admission": HUGE})
                assert r.status_code == 422, r.text
                error = r.json()["error"]
                assert error["code"] == "invalid_input" and "admission.sketch_width" in error["message"]
                assert "over the limit of" in error["message"]
                counted = [x for x in api.get("/metrics").text.splitlines()
                           if x.startswith('streamrec_errors_total{code="invalid_input"}')]
                assert counted and float(counted[0].split()[-1]) == 1.0
                r = api.put("/admin/tables/emb/policy", headers=auth(),
                            json={"admission": {"policy": "count", "min_count": 2, "sketch_width": 8192}})
                assert r.status_code == 200 and r.json()["applied"] and r.json()["lasts"] == LASTS
        finally:
            server.stop()
        with shards.client() as c:
            stats = [s["tables"]["emb"] for s in c.admin.stats()]
            assert sum(s["rows"] for s in stats) == 500, "no row was lost"
            assert all(s["admission_bytes"] == 8192 * 4 * 4 for s in stats), "only the sane sketch was made"
