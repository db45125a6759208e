"""The chief's job-control channel over a running two-tower job (what the service's admin API
calls), and the two-tower bundle: item vectors equal the item tower over the bundle's rows."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from core.atomic_files import read_json
from core.errors import NotFound
from exports import bundle
from exports.predictor import Predictor
from jobcontrol.channel import ControlClient
from logrecords.batch import Batch
from logrecords.schema_config import SchemaConfig
from trainer import checkpoints
from trainer.job_config import load_job_config

from .test_streaming_job import produce, wait_exit

pytestmark = pytest.mark.process


def test_control_ops_on_a_running_two_tower_job(broker, cluster, tmp_path: Path) -> None:
    kafka = produce(broker.bootstrap, 3000)
    slots = [{"name": f"C{i}", "tower": "item" if i == 2 else "user"} for i in range(1, 27)]
    data = {"model": {"type": "two_tower", "slots": slots, "embedding_dim": 4, "mlp": [16], "tower_dim": 4, "seed": 2},
            "records": SchemaConfig.criteo(item_id="C2").model_dump(mode="json"), "kafka": kafka,
            "passes": {"records": 100_000, "base_every": 2, "keep": 3},
            "checkpoint_dir": str(tmp_path / "checkpoints"), "export_dir": str(tmp_path / "exports")}
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(data))
    cfg = load_job_config(path)
    c = cluster(cfg.model.table_configs())
    job = c.train(path, broker.bootstrap, extra=("--max-idle-s", "5"))
    control = Path(cfg.checkpoint_dir) / "control.json"
    deadline = time.monotonic() + 60
    while not control.is_file():
        assert time.monotonic() < deadline and job.poll() is None, c.procs.log_of(job)[-2000:]
        time.sleep(0.05)
    client = ControlClient(read_json(control)["endpoint"], timeout_s=60)
    try:
        assert client.call("pause") == {"paused": True}
        status = client.call("status")
        assert status["paused"] is True and isinstance(status["lag"], int) and status["lag"] >= 0
        assert sum(status["lag_partitions"].values()) == status["lag"]
        first = client.call("checkpoint")
        assert first["pass"] == 1 and first["offsets"]["0"] == first["records_total"]
        assert [p["pass"] for p in client.call("passes")] == [1]
        assert client.call("export")["kind"] == "delta"  # the checkpoint above exported the base
        assert client.call("get_policy", table="emb4")["admission"]["policy"] == "always"
        with pytest.raises(NotFound):
            client.call("get_policy", table="nope")
        dry = client.call("put_policy", table="emb4", admission=None, eviction={"ttl_passes": 3}, dry_run=True)
        assert dry["dry_run"] and not dry["applied"] and dry["would_evict"] == 0  # every row was seen this pass
        assert client.call("get_policy", table="emb4")["eviction"]["ttl_passes"] is None
        assert client.call("rollback", pass_id=1)["pass"] == 1
        assert client.call("resume") == {"paused": False}
    finally:
        client.close()
    assert wait_exit(job) == 0, c.procs.log_of(job)[-3000:]
    root = Path(cfg.checkpoint_dir)
    assert checkpoints.read_pass(root, checkpoints.complete_passes(root)[-1])["offsets"] == {"0": 3000}

    exports = Path(cfg.export_dir)
    # the newest bundle with item vectors: a delta carries the items written since its parent, and
    # a trainer that had read all 3000 records before the pause trains nothing after the resume
    # (its last bundles then hold no items)
    with_items = [(m, got) for m in (bundle.read_manifest(exports, v) for v in reversed(bundle.list_versions(exports)))
                  if (got := bundle.load_items(exports, m)) is not None and got[0].size]
    assert with_items, "no bundle holds item vectors"
    man, (ids, vectors) = with_items[0]
    assert ids.size > 50 and vectors.shape == (ids.size, 4)
    # rebuild the served model from the bundle chain and recompute the item vectors
    from tables.sparse_table import SparseTable

    chain = []
    v = man.version
    while v is not None:
        m = bundle.read_manifest(exports, v)
        chain.append(m)
        v = m.parent_version if m.kind == "delta" else None
    tables = {t.name: SparseTable(t) for t in cfg.model.table_configs()}
    for m in reversed(chain):
        for name, t in tables.items():
            t.load(m.shard_dir(exports, 0) / "sparse" / name)
    pred = Predictor(man.model, bundle.load_dense(exports, man), lambda name, keys: tables[name].pull(keys))
    some = ids[:20]  # the item tower of this model reads only the item id slot
    items = Batch(labels=np.zeros(20, np.float32), dense=np.zeros((20, 0), np.float32),
                  slots={"C2": (some, np.arange(21, dtype=np.int64))}, item_id=some)
    np.testing.assert_allclose(pred.item_vectors(items), vectors[:20], rtol=1e-4, atol=1e-5)
