"""What `kubectl apply -k` would build from deploy/k8s/, checked without kubectl or a cluster:
every kustomization lists exactly the files of its directory, every file parses into objects,
the monitoring overlay builds on the base, the built objects are the renderer's for the committed
values, and a secretGenerator names files that are there. The build below models the kustomize
fields the renderer writes (resources, namespace, secretGenerator, generatorOptions); a
kustomization with any other field fails here until the model learns it. The schema checks of
every object are in test_k8s_render.py."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
import yaml

from launcher.k8s_render import render, write
from launcher.k8s_values import load_values

K8S = Path(__file__).resolve().parents[2] / "deploy" / "k8s"
VALUES_FILE = K8S / "values.yaml"
FIELDS = {"apiVersion", "kind", "namespace", "resources", "secretGenerator", "generatorOptions"}

Key = tuple[str, str, str]


def _key(doc: dict[str, Any]) -> Key:
    return doc["kind"], doc["metadata"]["name"], doc["metadata"].get("namespace", "")


def _objects(path: Path) -> list[dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    for doc in docs:
        assert isinstance(doc, dict) and doc.get("apiVersion") and doc.get("kind"), path
        assert doc.get("metadata", {}).get("name"), f"{path}: a {doc['kind']} without a name"
    return docs


def _secret(directory: Path, generator: dict[str, Any], options: dict[str, Any]) -> dict[str, Any]:
    """The Secret a secretGenerator of files makes; each file must be there, inside the directory."""
    data = {}
    for entry in generator["files"]:
        key, rel = entry.split("=", 1) if "=" in entry else (Path(entry).name, entry)
        file = directory / rel
        assert file.resolve().is_relative_to(directory.resolve()), f"{directory}: {rel} is outside the kustomization"
        assert file.is_file(), f"{directory}: secretGenerator {generator['name']} names {rel}, which is not there"
        data[key] = base64.b64encode(file.read_bytes()).decode()
    # without it kustomize suffixes the name with a hash that the workloads' secretRef would not carry
    assert options.get("disableNameSuffixHash") is True, directory
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": generator["name"]},
            "type": generator.get("type", "Opaque"), "data": data}


def _build(directory: Path) -> list[dict[str, Any]]:
    """The objects `kustomize build directory` prints, for the fields in FIELDS."""
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    assert set(kustomization) <= FIELDS, f"{directory}: a kustomize field this build does not model"
    assert (kustomization["apiVersion"], kustomization["kind"]) == ("kustomize.config.k8s.io/v1beta1",
                                                                    "Kustomization")
    docs: list[dict[str, Any]] = []
    for resource in kustomization["resources"]:
        path = directory / resource
        if path.is_dir():
            assert (path / "kustomization.yaml").is_file(), f"{directory}: {resource} has no kustomization"
            docs += _build(path)
        else:  # kustomize's load restrictor: a file resource lies in the kustomization's own directory
            assert path.parent == directory and path.is_file(), f"{directory}: {resource} is not a file of it"
            docs += _objects(path)
    options = kustomization.get("generatorOptions", {})
    docs += [_secret(directory, g, options) for g in kustomization.get("secretGenerator", [])]
    for doc in docs:
        if "namespace" in kustomization:
            doc["metadata"]["namespace"] = kustomization["namespace"]
    keys = [_key(d) for d in docs]
    assert len(keys) == len(set(keys)), f"{directory}: an object is listed twice"
    return docs


def _rendered(files: dict[str, str], *subs: str) -> dict[Key, dict[str, Any]]:
    return {_key(d): d for rel, text in files.items() if rel.split("/")[0] in subs
            and not rel.endswith("kustomization.yaml") for d in yaml.safe_load_all(text) if d}


def test_each_kustomization_lists_exactly_the_committed_files_of_its_directory() -> None:
    kustomizations = sorted(K8S.rglob("kustomization.yaml"))
    assert [p.parent.name for p in kustomizations] == ["base", "monitoring"]
    for path in kustomizations:
        resources = yaml.safe_load(path.read_text())["resources"]
        files = [r for r in resources if not (path.parent / r).is_dir()]
        assert len(files) == len(set(files)), path
        assert sorted(files) == sorted(p.name for p in path.parent.glob("*.y*ml") if p.name != path.name), path
        for file in files:
            assert _objects(path.parent / file), f"{path.parent / file} holds no object"


def test_the_monitoring_overlay_builds_on_the_base() -> None:
    resources = yaml.safe_load((K8S / "monitoring" / "kustomization.yaml").read_text())["resources"]
    assert resources[0] == "../base" and [r for r in resources if (K8S / "monitoring" / r).is_dir()] == ["../base"]
    base = {_key(d): d for d in _build(K8S / "base")}
    monitoring = {_key(d): d for d in _build(K8S / "monitoring")}
    assert base.items() <= monitoring.items() and len(monitoring) > len(base)


def test_the_committed_directories_build_into_the_objects_rendered_from_the_committed_values() -> None:
    files = render(load_values(VALUES_FILE), values_file=VALUES_FILE)
    for sub, parts in (("base", ("base",)), ("monitoring", ("base", "monitoring"))):
        assert {_key(d): d for d in _build(K8S / sub)} == _rendered(files, *parts), sub


def test_a_generated_secret_is_built_from_its_two_files_and_a_missing_one_is_named(tmp_path: Path) -> None:
    values = load_values(VALUES_FILE)
    values = values.model_copy(update={"secrets": values.secrets.model_copy(update={"generate": True})})
    files = render(values, values_file=VALUES_FILE)
    write(files, tmp_path)
    secrets = tmp_path / "base" / "secrets"
    secrets.mkdir()
    (secrets / "admin-token").write_text("a-long-admin-token")
    with pytest.raises(AssertionError, match="names secrets/ps-secret, which is not there"):
        _build(tmp_path / "base")
    (secrets / "ps-secret").write_text("0123456789abcdef0123")
    built = {_key(d): d for d in _build(tmp_path / "monitoring")}
    secret = built.pop(("Secret", values.secrets.name, values.namespace))
    assert {k: base64.b64decode(v).decode() for k, v in secret["data"].items()} == {
        "admin-token": "a-long-admin-token", "ps-secret": "0123456789abcdef0123"}
    assert built == _rendered(files, "base", "monitoring")
    # every key a pod takes from the Secret, by its unsuffixed name, is one the generator made
    pods = [d["spec"]["template"]["spec"] for d in built.values() if d["kind"] in ("Deployment", "StatefulSet")]
    taken = {(v["secret"]["secretName"], i["key"]) for pod in pods for v in pod.get("volumes", [])
             if "secret" in v for i in v["secret"]["items"]}
    taken |= {(ref["name"], ref["key"]) for pod in pods for c in pod["containers"] for e in c.get("env", [])
              if (ref := e.get("valueFrom", {}).get("secretKeyRef"))}
    assert taken == {(values.secrets.name, "admin-token"), (values.secrets.name, "ps-secret")}
