"""`kubectl kustomize` builds the committed base and monitoring overlay into exactly the rendered
objects (and the Secret, when the base generates it). Skipped where kubectl is not installed: the
schema checks in test_k8s_render.py need no cluster tool."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from launcher.k8s_render import render, write
from launcher.k8s_values import load_values

pytestmark = [pytest.mark.process,
              pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")]

K8S = Path(__file__).resolve().parents[2] / "deploy" / "k8s"


def _build(directory: Path) -> list[dict[str, Any]]:
    out = subprocess.run(["kubectl", "kustomize", str(directory)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def _key(doc: dict[str, Any]) -> tuple[str, str, str]:
    return doc["kind"], doc["metadata"]["name"], doc["metadata"].get("namespace", "")


def _rendered(directory: Path, *subs: str) -> dict[tuple[str, str, str], dict[str, Any]]:
    return {_key(d): d for sub in subs for p in sorted((directory / sub).glob("*.yaml"))
            if p.name != "kustomization.yaml" for d in yaml.safe_load_all(p.read_text()) if d}


def test_kustomize_builds_the_committed_directories_into_the_rendered_objects() -> None:
    for sub, parts in (("base", ("base",)), ("monitoring", ("base", "monitoring"))):
        built = {_key(d): d for d in _build(K8S / sub)}
        assert built == _rendered(K8S, *parts), sub


def test_the_generated_secret_holds_the_two_files(tmp_path: Path) -> None:
    values = load_values(K8S / "values.yaml").model_copy(update={"secrets": load_values(K8S / "values.yaml")
                                                                 .secrets.model_copy(update={"generate": True})})
    write(render(values, values_file=K8S / "values.yaml"), tmp_path)
    (tmp_path / "base" / "secrets").mkdir()
    (tmp_path / "base" / "secrets" / "admin-token").write_text("a-long-admin-token")
    (tmp_path / "base" / "secrets" / "ps-secret").write_text("0123456789abcdef0123")
    built = {_key(d): d for d in _build(tmp_path / "base")}
    secret = built.pop(("Secret", "streamrec-secrets", "streamrec"))
    assert set(secret["data"]) == {"admin-token", "ps-secret"}
    assert built == _rendered(tmp_path, "base")
