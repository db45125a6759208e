"""`ps.tables` in the root YAML: per table and per slot policies over a `default`, checked by
`config check` (an unknown table, slot or key is an error naming it) and rendered into the
shards' ps.yaml (and so into compose and Kubernetes, which start from the rendered files)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from cli.main import main
from core.errors import ConfigError
from launcher.system_config import load_config, role_files
from ps.ps_config import PSConfig

POLICIES = {
    "shard": {"max_bytes": 50_000_000},
    "tables": {
        "default": {"admission": {"policy": "count", "min_count": 2}, "nonfinite": "skip",
                    "eviction": {"max_rows": 1000}},
        "item_id": {"eviction": {"ttl_passes": 3}, "optimizer": {"kind": "sgd", "lr": 0.1}},
        "emb8": {"show_click_decay": 0.5},
    },
}


def write(tmp_path: Path, ps: dict) -> Path:
    path = tmp_path / "streamrec.yaml"
    path.write_text(yaml.safe_dump({"ps": ps}))
    return path


def test_policies_render_into_the_shards_tables(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, POLICIES))
    ps = PSConfig.model_validate(role_files(config, base=tmp_path)["ps.yaml"])  # what each shard loads
    assert ps.shard.max_bytes == 50_000_000
    shared, item = ps.table("emb8"), ps.table("emb8.item_id")  # the named slot got a table of its own
    assert shared.admission.policy == item.admission.policy == "count"  # from default
    assert shared.nonfinite == item.nonfinite == "skip"
    assert shared.show_click_decay == 0.5 and item.show_click_decay == 0.98  # emb8's own; the model's
    assert shared.eviction.max_rows == 1000 and shared.eviction.ttl_passes is None
    # a section a table sets replaces default's whole
    assert item.eviction.ttl_passes == 3 and item.eviction.max_rows is None
    assert item.optimizer.kind == "sgd" and shared.optimizer.kind == "adagrad"
    slot = next(s for s in config.train.model.slots if s.name == "item_id")
    assert slot.optimizer is not None and slot.optimizer.kind == "sgd"  # trainers and bundles agree on the table


def test_without_policies_the_tables_are_the_models() -> None:
    config = load_config(None)
    assert config.ps_tables() == config.train.model.table_configs()


@pytest.mark.parametrize(("ps", "named"), [
    ({"tables": {"emb9": {"nonfinite": "skip"}}}, "ps.tables.emb9"),
    ({"tables": {"default": {"evictoin": {}}}}, "ps.tables.default.evictoin"),
    ({"tables": {"item_id": {"eviction": {"ttl": 3}}}}, "ps.tables.item_id.eviction.ttl"),
    ({"tables": {"default": {"admission": {"policy": "sometimes"}}}}, "ps.tables.default.admission"),
    ({"shard": {"max_byte": 1}}, "ps.shard.max_byte"),
    ({"tables": {"ids": {"eviction": {"ttl_passes": 3}}}}, "ps.tables.ids.eviction"),
])
def test_config_check_names_an_unknown_table_slot_or_key(tmp_path: Path, ps: dict, named: str,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, ps)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert named in err.value.message
    assert main(["config", "check", "--config", str(path)]) != 0
    assert named in capsys.readouterr().err


def test_the_id_rows_tables_take_the_tier_of_ids_else_of_default(tmp_path: Path) -> None:
    """Users' histories, items' feature rows and rate rows are made by the shards on first write:
    their disk tier is ``ps.tables.ids``' (or ``default``'s), rendered into ps.yaml."""
    def rendered(tables: dict) -> PSConfig:
        config = load_config(write(tmp_path, {"tables": tables}))
        return PSConfig.model_validate(role_files(config, base=tmp_path)["ps.yaml"])

    tier = {"disk": {"path": "/data/tier", "max_bytes": 1 << 30}, "low_water": 0.8}
    own = rendered({"ids": {"tier": tier}}).id_rows_tier
    assert own is not None and own.disk.path == "/data/tier" and own.low_water == 0.8
    assert rendered({"default": {"tier": tier}}).id_rows_tier == own
    assert rendered({"default": {"nonfinite": "skip"}}).id_rows_tier is None
    assert PSConfig.model_validate(role_files(load_config(None), base=tmp_path)["ps.yaml"]).id_rows_tier is None
