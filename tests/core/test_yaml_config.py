from pathlib import Path

import pytest

from core.errors import ConfigError
from core.yaml_config import FrozenModel, load_yaml


class Inner(FrozenModel):
    rate: float = 1.0


class Outer(FrozenModel):
    name: str
    inner: Inner = Inner()


def test_loads_typed_values(tmp_path: Path) -> None:
    p = tmp_path / "c.yaml"
    p.write_text("name: t\ninner:\n  rate: 2.5\n")
    cfg = load_yaml(p, Outer)
    assert cfg.name == "t" and cfg.inner.rate == 2.5


def test_unknown_key_names_key_and_file(tmp_path: Path) -> None:
    p = tmp_path / "c.yaml"
    p.write_text("name: t\ninner:\n  rat: 2.5\n")
    with pytest.raises(ConfigError) as exc:
        load_yaml(p, Outer)
    assert "inner.rat" in str(exc.value) and str(p) in str(exc.value)


def test_wrong_type_and_bad_yaml(tmp_path: Path) -> None:
    p = tmp_path / "c.yaml"
    p.write_text("name: t\ninner: {rate: fast}\n")
    with pytest.raises(ConfigError, match=r"inner\.rate"):
        load_yaml(p, Outer)
    p.write_text("name: [unclosed\n")
    with pytest.raises(ConfigError, match="invalid YAML"):
        load_yaml(p, Outer)
    with pytest.raises(ConfigError, match="cannot read"):
        load_yaml(tmp_path / "missing.yaml", Outer)


def test_config_is_frozen() -> None:
    cfg = Outer(name="x")
    with pytest.raises(Exception):  # noqa: B017 - pydantic raises ValidationError on frozen assignment
        cfg.name = "y"
