"""docs/configuration.md is generated from the config models: the committed file is the generator's
output, every key reachable from the root YAML has a description, and a key without one is an error
naming it."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import Field

from cli.main import main
from core.errors import ConfigError
from core.yaml_config import FrozenModel
from launcher.config_docs import COMMAND, render, sections

DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def test_committed_reference_is_the_generators_output() -> None:
    assert DOC.read_text() == render(), f"docs/configuration.md is stale: run `{COMMAND}`"


def test_every_key_has_a_row_with_a_description() -> None:
    rows = {row.path: row for sec in sections() for row in sec.rows}
    assert all(row.description for row in rows.values())
    # every section of the root, and keys deep inside it, a list's items and a shared model included
    for key in ("kafka.bootstrap_servers", "schema.slots[].hash", "schema.history.length", "ps.client.timeout_s",
                "train.model.retrieval.item_bias", "train.model.dense_optimizer.lr", "train.passes.seconds",
                "service.read_through.endpoints", "up.restart.backoff_s", "up.replay.max_lag"):
        assert key in rows, key
    # one default per key: the root's train section takes the job's own pass defaults
    assert rows["train.passes"].default == "its keys' defaults" and rows["train.passes.seconds"].default == "`2.0`"
    assert rows["schema.slots[].kind"].default == "required"


class _Inner(FrozenModel):
    said: int = Field(1, description="A key with a description.")
    unsaid: int = 2


class _Root(FrozenModel):
    inner: _Inner = Field(_Inner(), description="A section.")
    bare: str = "x"
    items: tuple[_Inner, ...] = Field((), description="A list of sections.")


def test_a_key_without_a_description_is_an_error_naming_every_such_key() -> None:
    with pytest.raises(ConfigError) as err:
        sections(_Root)
    assert err.value.detail["keys"] == ["bare", "inner.unsaid"]  # each once, the list's items under the first path
    assert "bare" in err.value.message and "inner.unsaid" in err.value.message


def test_the_command_prints_and_writes_the_reference(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "docs"]) == 0
    assert capsys.readouterr().out == render()
    out = tmp_path / "configuration.md"
    assert main(["config", "docs", "--write", str(out)]) == 0
    assert out.read_text() == render()
