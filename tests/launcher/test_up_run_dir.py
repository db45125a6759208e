"""What `up` writes in its run directory for its roles: a PS secret made for each run (0600),
handed to the service's read-through; the `up.restart` policy is typed and checked."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
import yaml

from core.errors import ConfigError
from launcher.system_config import load_config
from launcher.up_run_dir import RunDir, ps_secret, write_run_configs
from ps.auth import MIN_SECRET_BYTES, read_secret
from service.settings import load_settings


def test_every_run_gets_a_new_secret_only_its_owner_reads(tmp_path: Path) -> None:
    first = ps_secret(tmp_path)
    assert stat.S_IMODE(first.stat().st_mode) == 0o600
    old = read_secret(first)
    assert len(bytes.fromhex(old.decode())) >= MIN_SECRET_BYTES
    first.chmod(0o644)  # left readable by a careless hand: the next run's file is 0600 again
    again = ps_secret(tmp_path)
    assert again == first and read_secret(again) != old
    assert stat.S_IMODE(again.stat().st_mode) == 0o600


def test_the_services_read_through_gets_the_runs_secret_and_shards(tmp_path: Path) -> None:
    path = tmp_path / "streamrec.yaml"
    path.write_text(yaml.safe_dump({"service": {"read_through": {"endpoints": ["tcp://127.0.0.1:1"],
                                                                 "timeout_s": 0.2}}}))
    run = RunDir(tmp_path / "run")
    run.root.mkdir()
    secret = ps_secret(run.root)
    shards = ["tcp://127.0.0.1:7001", "tcp://127.0.0.1:7002"]  # the ports `up` picked for its shards
    write_run_configs(load_config(path), run, bootstrap="127.0.0.1:9092", control_endpoint="tcp://127.0.0.1:2",
                      secret_file=secret, shard_endpoints=shards)
    settings = load_settings(run.roles / "service.yaml", env={})
    assert settings.read_through is not None and settings.read_through.secret_file == str(secret)
    assert settings.read_through.endpoints == shards and settings.read_through.timeout_s == 0.2


@pytest.mark.parametrize(("restart", "key"), [({"max_restarts": "many"}, "up.restart.max_restarts"),
                                              ({"backof_s": 1}, "up.restart.backof_s"),
                                              ({"window_s": 0}, "up.restart.window_s")])
def test_the_restart_policy_is_typed_and_unknown_keys_are_errors(tmp_path: Path, restart: dict, key: str) -> None:
    path = tmp_path / "streamrec.yaml"
    path.write_text(yaml.safe_dump({"up": {"restart": restart}}))
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert key in err.value.message and str(path) in err.value.message


def test_port_0_is_a_free_port_drawn_at_start_that_the_console_and_the_roles_share(tmp_path: Path) -> None:
    from launcher.up import LocalSystem, UpOptions

    config = tmp_path / "streamrec.yaml"
    config.write_text(yaml.safe_dump({"up": {"port": 0}}))
    system = LocalSystem(UpOptions(config=load_config(config), run_dir=tmp_path / "run"))
    port = system.cfg.up.port
    assert port > 0 and system.api_url.endswith(f":{port}")
