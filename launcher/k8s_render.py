"""``streamrec deploy render``: the Kubernetes manifests, rendered from one values file.

Two Kustomize directories come out of :func:`render`: ``base/`` (the ConfigMap with the one
streamrec YAML, the storage claim, the three workloads and their Services, the
PodDisruptionBudgets) applies to any cluster; ``monitoring/`` adds the Prometheus Operator's
ServiceMonitor and a PrometheusRule wrapping ``deploy/prometheus/alerts.yml`` on top of it.
The committed files under ``deploy/k8s/`` are this module's output for ``deploy/k8s/values.yaml``
(a test checks), so they are edited through the values, never by hand.
"""

from __future__ import annotations

import hashlib
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from core.atomic_files import write_bytes
from core.errors import ConfigError
from core.yaml_config import validate_config
from launcher import config_docs
from launcher import k8s_workloads as workloads
from launcher.k8s_values import DeployValues, StorageKind
from launcher.system_config import StreamrecConfig

COMMAND = "streamrec deploy render --values deploy/k8s/values.yaml --out deploy/k8s"
DOCS_COMMAND = "streamrec deploy docs --write docs/deployment-values.md"
DOCS_INTRO = f"""\
# Kubernetes values

<!-- Generated from the values model by `{DOCS_COMMAND}`: edit the model's descriptions, not this file. -->

Every key of `deploy/k8s/values.yaml` (`launcher/k8s_values.py`, `DeployValues`), its default and
what it sets; an unknown key is an error naming it. `{COMMAND}` renders the manifests from it
([deployment](deployment.md#kubernetes)).
"""
SUBDIRS = ("base", "monitoring")
# the streamrec YAML's keys the values own: set in the ConfigMap from the values, refused in values.config
OWNED_KEYS = (("kafka", "bootstrap_servers"), ("train", "checkpoint_dir"), ("train", "export_dir"),
              ("train", "control_endpoint"), ("service", "job_control_file"), ("service", "exports_dir"))


def values_reference() -> str:
    """docs/deployment-values.md's text."""
    # a long default is spelled out in its key's description instead
    return config_docs.render(DeployValues, intro=DOCS_INTRO).replace(
        "built in (`streamrec config check` prints it)", "in the description")


def streamrec_config(values: DeployValues) -> dict[str, Any]:
    """The ConfigMap's streamrec YAML: ``values.config`` with the keys the values own filled in,
    validated as the roles will load it."""
    taken = [".".join(k) for k in OWNED_KEYS if k[1] in (values.config.get(k[0]) or {})]
    if taken:
        raise ConfigError(f"values config: {', '.join(taken)} come from the values (kafka, storage), not config",
                          detail={"keys": taken})
    config = {k: dict(v) if isinstance(v, dict) else v for k, v in values.config.items()}
    checkpoints = values.storage.root("checkpoints")
    config["kafka"] = {**config.get("kafka", {}), "bootstrap_servers": list(values.bootstrap_servers)}
    config["train"] = {**config.get("train", {}), "checkpoint_dir": checkpoints,
                       "export_dir": values.storage.root("exports"),
                       "control_endpoint": f"tcp://0.0.0.0:{workloads.CONTROL_PORT}"}
    # the chief writes its pod's address there; the API reads it, so it follows a new chief
    config["service"] = {**config.get("service", {}), "job_control_file": f"{checkpoints}/control.json"}
    _check_tier_paths(values, validate_config(config, StreamrecConfig, "values config"))
    return config


def _check_tier_paths(values: DeployValues, config: StreamrecConfig) -> None:
    """Every disk tier the config sets must write into the shard pods' tier volume (elsewhere the
    container's own filesystem would take the rows, or refuse them)."""
    for name, policy in config.ps.tables.items():
        if policy.tier is None:
            continue
        path, key = policy.tier.disk.path, f"config.ps.tables.{name}.tier.disk.path"
        if values.disk_tier is None:
            raise ConfigError(f"{key}: set `disk_tier` in the values, so that the shard pods get a volume at "
                              f"{workloads.TIER_DIR} for it", detail={"keys": [key, "disk_tier"]})
        if not PurePosixPath(path).is_relative_to(workloads.TIER_DIR):
            raise ConfigError(f"{key}: {path!r} is not under the shard pods' tier volume {workloads.TIER_DIR}",
                              detail={"keys": [key]})


def _config_map(values: DeployValues, text: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": workloads.meta("streamrec-config", values),
            "data": {"streamrec.yaml": text}}


def _claim(values: DeployValues) -> dict[str, Any]:
    spec: dict[str, Any] = {"accessModes": ["ReadWriteMany"],
                            "resources": {"requests": {"storage": values.storage.size}}}
    if values.storage.storage_class is not None:
        spec["storageClassName"] = values.storage.storage_class
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": workloads.meta(values.storage.claim_name, values), "spec": spec}


def _budgets(values: DeployValues) -> list[dict[str, Any]]:
    # maxUnavailable, not minAvailable: a drain proceeds one pod at a time whatever the counts
    return [{"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
             "metadata": workloads.meta(f"streamrec-{role}", values, role),
             "spec": {"maxUnavailable": values.disruption.max_unavailable,
                      "selector": {"matchLabels": workloads.labels(role)}}}
            for role in ("shard", "trainer", "api")]


def _service_monitor(values: DeployValues) -> dict[str, Any]:
    meta = workloads.meta("streamrec", values)
    meta["labels"] |= values.monitoring.labels
    # the job label is the Service's name (streamrec-shard, -trainer, -api) and component the role, as in compose
    relabel = [{"sourceLabels": ["__meta_kubernetes_service_label_app_kubernetes_io_component"],
                "targetLabel": "component"}]
    return {"apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor", "metadata": meta, "spec": {
        "selector": {"matchLabels": workloads.labels()},
        "namespaceSelector": {"matchNames": [values.namespace]},
        "endpoints": [{"port": "metrics", "path": "/metrics", "interval": values.monitoring.interval,
                       "relabelings": relabel}]}}


def _prometheus_rule(values: DeployValues, rules_file: Path) -> dict[str, Any]:
    try:
        rules = yaml.safe_load(rules_file.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"{rules_file}: cannot read the alert rules: {exc}",
                          detail={"file": str(rules_file)}) from None
    if not isinstance(rules, dict) or not isinstance(rules.get("groups"), list):
        raise ConfigError(f"{rules_file}: a Prometheus rule file has a `groups` list", detail={"file": str(rules_file)})
    meta = workloads.meta("streamrec", values)
    meta["labels"] |= values.monitoring.labels
    return {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule", "metadata": meta,
            "spec": {"groups": rules["groups"]}}


def _kustomization(values: DeployValues, resources: list[str], **extra: Any) -> dict[str, Any]:
    return {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
            "namespace": values.namespace, "resources": resources, **extra}


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (the ConfigMap's streamrec YAML) as literal blocks, readable in the file."""


def _str(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style="|" if "\n" in text else None)


_Dumper.add_representer(str, _str)


def _text(docs: list[dict[str, Any]], values: DeployValues, values_name: str) -> str:
    header = (f"# Generated by `streamrec deploy render` from {values_name}: edit the values, not this file.\n"
              f"# Needs Kubernetes >= {values.minimum_kubernetes}.\n")
    body = "---\n".join(yaml.dump(d, Dumper=_Dumper, sort_keys=False, width=120) for d in docs)
    return header + body


def render(values: DeployValues, *, values_file: Path) -> dict[str, str]:
    """Every file of the two directories: relative path -> text. ``values_file`` names the
    source in the headers and anchors ``monitoring.alert_rules_file``."""
    config_text = yaml.safe_dump(streamrec_config(values), sort_keys=False, width=120)
    checksum = hashlib.sha256(config_text.encode()).hexdigest()[:16]  # a config change rolls every pod
    admin_env = StreamrecConfig.model_validate(values.config).service.admin_token_env
    base: dict[str, list[dict[str, Any]]] = {"configmap.yaml": [_config_map(values, config_text)]}
    if values.storage.kind is StorageKind.VOLUME:
        base["storage.yaml"] = [_claim(values)]
    base["shards.yaml"] = workloads.shards(values, checksum)
    base["trainers.yaml"] = workloads.trainers(values, checksum)
    base["api.yaml"] = workloads.api(values, checksum, admin_token_env=admin_env)
    if values.disruption.enabled:
        base["disruption.yaml"] = _budgets(values)
    monitoring: dict[str, list[dict[str, Any]]] = {"servicemonitor.yaml": [_service_monitor(values)]}
    rules_file = values_file.parent / values.monitoring.alert_rules_file
    if rules_file.exists():
        monitoring["prometheusrule.yaml"] = [_prometheus_rule(values, rules_file)]

    extra: dict[str, Any] = {}
    if values.secrets.generate:
        extra = {"secretGenerator": [{"name": values.secrets.name, "type": "Opaque",
                                      "files": ["admin-token=secrets/admin-token", "ps-secret=secrets/ps-secret"]}],
                 "generatorOptions": {"disableNameSuffixHash": True}}
    files = {}
    for sub, docs in (("base", base), ("monitoring", monitoring)):
        for file, objects in docs.items():
            files[f"{sub}/{file}"] = _text(objects, values, values_file.name)
    kustomizations = {"base": _kustomization(values, list(base), **extra),
                      "monitoring": _kustomization(values, ["../base", *monitoring])}
    for sub, kustomization in kustomizations.items():
        files[f"{sub}/kustomization.yaml"] = _text([kustomization], values, values_file.name)
    return files


def write(files: dict[str, str], out: Path) -> list[Path]:
    """Write ``files`` under ``out`` and remove the YAML files there that are no longer rendered."""
    written = []
    for sub in SUBDIRS:
        for stale in sorted((out / sub).glob("*.yaml")):
            if f"{sub}/{stale.name}" not in files:
                stale.unlink()
    for rel, text in files.items():
        path = out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        write_bytes(path, [text.encode()])
        written.append(path)
    return written


def stale(files: dict[str, str], out: Path) -> list[str]:
    """The files under ``out`` that differ from ``files``, are missing, or are left over."""
    found = {f"{sub}/{p.name}" for sub in SUBDIRS for p in (out / sub).glob("*.yaml")}
    differ = [rel for rel, text in files.items() if not (out / rel).is_file() or (out / rel).read_text() != text]
    return sorted(set(differ) | (found - files.keys()))
