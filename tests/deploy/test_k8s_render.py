"""The Kubernetes manifests rendered from one values file (launcher.k8s_render): the committed
deploy/k8s/ is the renderer's output; counts, image, Kafka address and namespace flow from the
values into every place that needs them; every variant validates against the Kubernetes schemas
of its minimum version; probes ask dependencies in readiness only; the image pins its packages
and ships numba's cache."""

from __future__ import annotations

import re
import shlex
import socket
import sys
import tomllib
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from cli.main import build_parser, main
from core.errors import ConfigError
from core.yaml_config import validate_config
from launcher import k8s_workloads
from launcher.k8s_render import COMMAND, DOCS_COMMAND, render, stale, values_reference
from launcher.k8s_values import (
    OLDEST_VALIDATED,
    POD_INDEX_LABEL_SINCE,
    DeployValues,
    ShardIndexSource,
    load_values,
)
from ps.cluster import cluster_from_env
from trainer.rank_claim import CLAIM_TIMEOUT_S

REPO = Path(__file__).resolve().parents[2]
K8S = REPO / "deploy" / "k8s"
VALUES_FILE = K8S / "values.yaml"
CRD_GROUP = "monitoring.coreos.com/"


def _values(**update: Any) -> DeployValues:
    """The committed values with top-level keys replaced (validated as a values file is)."""
    return validate_config({**load_values(VALUES_FILE).model_dump(mode="json"), **update}, DeployValues)


def _objects(files: dict[str, str], sub: str | None = None) -> list[dict[str, Any]]:
    return [d for rel, text in files.items() if not rel.endswith("kustomization.yaml")
            and (sub is None or rel.startswith(f"{sub}/")) for d in yaml.safe_load_all(text) if d]


def _named(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    return next(d for d in docs if (d["kind"], d["metadata"]["name"]) == (kind, name))


def _containers(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    pods = [d["spec"]["template"]["spec"] for d in docs if d["kind"] in ("Deployment", "StatefulSet")]
    return [c for pod in pods for c in pod.get("initContainers", []) + pod["containers"]]


def _trainer_env(docs: list[dict[str, Any]]) -> dict[str, str]:
    trainer = _named(docs, "Deployment", "streamrec-trainer")["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e["value"] for e in trainer["env"] if "value" in e}


def test_the_committed_manifests_are_the_renderers_output_for_the_committed_values() -> None:
    files = render(load_values(VALUES_FILE), values_file=VALUES_FILE)
    assert stale(files, K8S) == [], f"deploy/k8s is stale: run `{COMMAND}`"


def test_the_values_reference_is_current_and_every_key_has_a_description() -> None:
    doc = REPO / "docs" / "deployment-values.md"
    assert doc.read_text() == values_reference(), f"docs/deployment-values.md is stale: run `{DOCS_COMMAND}`"
    for key in ("image.registry", "shards", "trainers", "kafka.bootstrap_servers", "storage.object_store_root",
                "secrets.generate", "resources.shard.limits", "disruption.max_unavailable", "affinity.anti_affinity",
                "monitoring.labels", "shard_index"):
        assert f"| `{key}` |" in doc.read_text(), key


def test_each_kustomization_lists_exactly_the_objects_of_its_directory() -> None:
    files = render(_values(), values_file=VALUES_FILE)
    for sub in ("base", "monitoring"):
        kustomization = yaml.safe_load(files[f"{sub}/kustomization.yaml"])
        own = sorted(rel.split("/", 1)[1] for rel in files if rel.startswith(f"{sub}/")
                     and not rel.endswith("kustomization.yaml"))
        assert sorted(r for r in kustomization["resources"] if not r.startswith("../")) == own
        assert kustomization["namespace"] == "streamrec"
    assert yaml.safe_load(files["monitoring/kustomization.yaml"])["resources"][0] == "../base"


@pytest.mark.parametrize("shards,trainers", [(2, 2), (5, 3), (1, 7)])
def test_counts_given_once_reach_every_place_that_needs_them(shards: int, trainers: int) -> None:
    docs = _objects(render(_values(shards=shards, trainers=trainers), values_file=VALUES_FILE))
    sts = _named(docs, "StatefulSet", "streamrec-shard")
    assert sts["spec"]["replicas"] == shards
    deployment = _named(docs, "Deployment", "streamrec-trainer")
    assert deployment["spec"]["replicas"] == trainers
    env = _trainer_env(docs)
    expected = [f"streamrec-shard-{i}.streamrec-shard:{k8s_workloads.PS_PORT}" for i in range(shards)]
    assert env["STREAMREC_SHARD_ENDPOINTS"].split(",") == expected
    assert int(env["STREAMREC_NUM_WORKERS"]) == trainers
    spec = cluster_from_env({**env, "STREAMREC_HOLDER_ID": "pod-x", "STREAMREC_ADVERTISE_HOST": "10.0.0.1"})
    assert len(spec.shard_endpoints) == shards and spec.num_workers == trainers  # what a trainer parses
    probe = deployment["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["exec"]["command"]
    assert probe[3].split(",") == expected
    # a budget for each role, selecting exactly that role's pods
    budgets = [d for d in docs if d["kind"] == "PodDisruptionBudget"]
    workloads = [d for d in docs if d["kind"] in ("Deployment", "StatefulSet")]
    assert len(budgets) == len(workloads) == 3
    for budget in budgets:
        selected = [w for w in workloads if budget["spec"]["selector"]["matchLabels"].items()
                    <= w["spec"]["template"]["metadata"]["labels"].items()]
        assert len(selected) == 1 and budget["spec"]["maxUnavailable"] == 1
    # the values file says each count once
    text = VALUES_FILE.read_text()
    assert len(re.findall(r"(?m)^shards:", text)) == 1 and len(re.findall(r"(?m)^trainers:", text)) == 1


def _variants() -> dict[str, DeployValues]:
    return {
        "committed": _values(),
        "bigger": _values(shards=8, trainers=4, api_replicas=3),
        "object-store": _values(storage={"kind": "object_store", "object_store_root": "s3://b/sr"},
                                secrets={"generate": True}),
        "required-spread": _values(affinity={"anti_affinity": "required", "node_selector": {"pool": "train"},
                                             "priority_class": "high",
                                             "tolerations": [{"key": "dedicated", "operator": "Equal",
                                                              "value": "ml", "effect": "NoSchedule"}]}),
        "no-spread-no-pdb": _values(affinity={"anti_affinity": "off"}, disruption={"enabled": False}, image={
            "registry": "r.example/x", "digest": "sha256:" + "a" * 64, "pull_secrets": ["regcred"]}),
        "hostname-index": _values(shard_index="hostname"),
        "disk-tier": _values(disk_tier={"size_limit": "50Gi"}, config={**_values().config, "ps": _TIERED_PS}),
    }


_TIERED_PS = {"shard": {"max_bytes": 4 << 30}, "tables": {
    "default": {"tier": {"disk": {"path": f"{k8s_workloads.TIER_DIR}/tables", "max_bytes": 40 << 30}}}}}


def test_a_disk_tier_gets_a_volume_in_every_shard_pod_and_a_path_outside_it_is_refused() -> None:
    docs = _objects(render(_variants()["disk-tier"], values_file=VALUES_FILE))
    pod = _named(docs, "StatefulSet", "streamrec-shard")["spec"]["template"]["spec"]
    assert {"name": "tier", "emptyDir": {"sizeLimit": "50Gi"}} in pod["volumes"]
    assert {"name": "tier", "mountPath": k8s_workloads.TIER_DIR} in pod["containers"][0]["volumeMounts"]
    trainer = _named(docs, "Deployment", "streamrec-trainer")["spec"]["template"]["spec"]
    assert all(v["name"] != "tier" for v in trainer["volumes"])  # only shards hold tables
    config = yaml.safe_load(next(d for d in docs if d["kind"] == "ConfigMap")["data"]["streamrec.yaml"])
    assert config["ps"] == _TIERED_PS
    no_volume = _values(config={**_values().config, "ps": _TIERED_PS})
    with pytest.raises(ConfigError) as err:
        render(no_volume, values_file=VALUES_FILE)
    assert err.value.detail["keys"] == ["config.ps.tables.default.tier.disk.path", "disk_tier"]
    elsewhere = {"tables": {"ids": {"tier": {"disk": {"path": "/data/tier"}}}}}
    with pytest.raises(ConfigError) as err:
        render(_values(disk_tier={}, config={**_values().config, "ps": elsewhere}), values_file=VALUES_FILE)
    assert "config.ps.tables.ids.tier.disk.path" in err.value.message and "/data/tier" in err.value.message


@pytest.mark.parametrize("name", list(_variants()))
def test_every_variant_validates_against_the_schemas_of_its_minimum_kubernetes(name: str) -> None:
    values = _variants()[name]
    files = render(values, values_file=VALUES_FILE)
    version = f"{values.minimum_kubernetes}.0"
    for rel, text in files.items():
        assert f"Needs Kubernetes >= {values.minimum_kubernetes}." in text.splitlines()[1], rel
    for doc in _objects(files):
        if not doc["apiVersion"].startswith(CRD_GROUP):
            kubernetes_validate.validate(doc, version, strict=True)
            kubernetes_validate.validate(doc, kubernetes_validate.latest_version(), strict=True)


def test_placement_reaches_every_pod() -> None:
    values = _variants()["required-spread"]
    for workload in (d for d in _objects(render(values, values_file=VALUES_FILE))
                     if d["kind"] in ("Deployment", "StatefulSet")):
        pod = workload["spec"]["template"]["spec"]
        component = workload["metadata"]["labels"]["app.kubernetes.io/component"]
        assert pod["nodeSelector"] == {"pool": "train"} and pod["priorityClassName"] == "high"
        assert pod["tolerations"] == [{"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}]
        (term,) = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert term["labelSelector"]["matchLabels"]["app.kubernetes.io/component"] == component


def test_minimum_version_is_stated_by_the_shard_index_source() -> None:
    assert _values().minimum_kubernetes == POD_INDEX_LABEL_SINCE == "1.28"
    assert _values(shard_index=ShardIndexSource.HOSTNAME).minimum_kubernetes == OLDEST_VALIDATED
    pod_index = _objects(render(_values(), values_file=VALUES_FILE))
    shard = _named(pod_index, "StatefulSet", "streamrec-shard")["spec"]["template"]["spec"]["containers"][0]
    assert shard["env"][0]["valueFrom"]["fieldRef"]["fieldPath"] == k8s_workloads.POD_INDEX_FIELD


def test_the_hostname_fallback_runs_a_real_shard_command_with_the_ordinal_of_the_pod_name() -> None:
    docs = _objects(render(_values(shard_index=ShardIndexSource.HOSTNAME), values_file=VALUES_FILE))
    shard = _named(docs, "StatefulSet", "streamrec-shard")["spec"]["template"]["spec"]["containers"][0]
    assert shard["command"][:2] == ["sh", "-c"] and "env" not in shard
    script = shard["command"][2].replace("${HOSTNAME##*-}", "streamrec-shard-11"[len("streamrec-shard-"):])
    argv = shlex.split(script)
    assert argv[:2] == ["exec", "streamrec"]
    args = build_parser().parse_args(argv[2:])
    assert args.index == 11 and callable(args.func)


def test_every_image_carries_the_registry_and_a_missing_registry_is_refused() -> None:
    for name, values in _variants().items():
        docs = _objects(render(values, values_file=VALUES_FILE))
        images = {c["image"] for c in _containers(docs)}
        assert images == {values.image.reference}, name
        assert all(i.startswith(values.image.registry.rstrip("/") + "/") for i in images), name
    assert _variants()["no-spread-no-pdb"].image.reference == "r.example/x/streamrec@sha256:" + "a" * 64
    with pytest.raises(ConfigError) as err:
        validate_config({}, DeployValues, "values.yaml")  # the model's own default: no registry
    assert "image.registry" in err.value.message


def test_kafka_defaults_to_the_release_namespace_and_owned_keys_are_refused_in_config() -> None:
    docs = _objects(render(_values(namespace="ml-prod"), values_file=VALUES_FILE))
    assert {d["metadata"]["namespace"] for d in docs} == {"ml-prod"}
    (cm,) = [d for d in docs if d["kind"] == "ConfigMap"]
    config = yaml.safe_load(cm["data"]["streamrec.yaml"])
    assert config["kafka"]["bootstrap_servers"] == ["kafka.ml-prod.svc.cluster.local:9092"]
    probe = _named(docs, "Deployment", "streamrec-trainer")["spec"]["template"]["spec"]["containers"][0]
    assert probe["readinessProbe"]["exec"]["command"][4] == "kafka.ml-prod.svc.cluster.local:9092"
    given = _values(kafka={"bootstrap_servers": ("b-1.msk:9092", "b-2.msk:9092")})
    cm = next(d for d in _objects(render(given, values_file=VALUES_FILE)) if d["kind"] == "ConfigMap")
    assert yaml.safe_load(cm["data"]["streamrec.yaml"])["kafka"]["bootstrap_servers"] == ["b-1.msk:9092",
                                                                                         "b-2.msk:9092"]
    trainer = _named(docs, "Deployment", "streamrec-trainer")["spec"]["template"]["spec"]["containers"][0]
    assert "envFrom" not in trainer
    sasl = _values(kafka={"credentials_secret": "kafka-sasl"})
    trainer = _named(_objects(render(sasl, values_file=VALUES_FILE)), "Deployment", "streamrec-trainer")
    assert {"secretRef": {"name": "kafka-sasl"}} in trainer["spec"]["template"]["spec"]["containers"][0]["envFrom"]
    config_with_owned = {**_values().config, "kafka": {"bootstrap_servers": ["x:9092"]}}
    with pytest.raises(ConfigError) as err:
        render(_values(config=config_with_owned), values_file=VALUES_FILE)
    assert err.value.detail["keys"] == ["kafka.bootstrap_servers"]
    with pytest.raises(ConfigError) as bad:
        render(_values(config={"train": {"no_such_key": 1}}), values_file=VALUES_FILE)
    assert "train.no_such_key" in bad.value.message


def _run_reach_probe(*args: str) -> int:
    """The trainers' readiness script run here, as the kubelet would exec it."""
    argv = sys.argv
    sys.argv = ["-c", *args]
    try:
        exec(compile(k8s_workloads.REACH_SCRIPT, "<probe>", "exec"), {"__name__": "__main__"})
    except SystemExit as done:
        return int(done.code or 0)
    finally:
        sys.argv = argv
    return 0


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_trainers_liveness_asks_the_process_and_readiness_asks_shards_and_kafka() -> None:
    docs = _objects(render(_values(), values_file=VALUES_FILE))
    trainer = _named(docs, "Deployment", "streamrec-trainer")["spec"]["template"]["spec"]["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in trainer["ports"]}
    for probe in ("livenessProbe", "startupProbe"):
        assert trainer[probe]["httpGet"]["port"] == "metrics" and "exec" not in trainer[probe]
    # the kubelet leaves a trainer its whole wait for a rank: it gives up by itself first
    startup = trainer["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] > CLAIM_TIMEOUT_S
    assert ports["metrics"] == int(trainer["args"][trainer["args"].index("--metrics-port") + 1])
    for kind, name in (("StatefulSet", "streamrec-shard"), ("Deployment", "streamrec-api")):
        c = _named(docs, kind, name)["spec"]["template"]["spec"]["containers"][0]
        assert "httpGet" in c["livenessProbe"] and "httpGet" in c["startupProbe"], name
    api = _named(docs, "Deployment", "streamrec-api")["spec"]["template"]["spec"]["containers"][0]
    assert (api["livenessProbe"]["httpGet"]["path"], api["readinessProbe"]["httpGet"]["path"]) == ("/healthz",
                                                                                                     "/readyz")
    # a trainer that is not ready (a shard is down) is still scraped
    assert _named(docs, "Service", "streamrec-trainer")["spec"]["publishNotReadyAddresses"] is True

    with socket.socket() as shard, socket.socket() as broker:
        for s in (shard, broker):
            s.bind(("127.0.0.1", 0))
            s.listen()
        up = f"127.0.0.1:{shard.getsockname()[1]}"
        kafka = f"127.0.0.1:{broker.getsockname()[1]}"
        down = f"127.0.0.1:{_closed_port()}"
        assert _run_reach_probe(up, kafka) == 0
        assert _run_reach_probe(f"{up},{down}", kafka) == 1  # one shard down: not ready
        assert _run_reach_probe(up, f"{down},{kafka}") == 0  # one broker of several is enough
        assert _run_reach_probe(up, down) == 1


def test_monitoring_selects_every_roles_metrics_port_and_wraps_the_alert_rules(tmp_path: Path) -> None:
    files = render(_values(), values_file=VALUES_FILE)
    docs = _objects(files, "base")
    (monitor,) = [d for d in _objects(files, "monitoring") if d["kind"] == "ServiceMonitor"]
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["path"] == "/metrics" and re.fullmatch(r"\d+[smh]", endpoint["interval"])
    selected = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Service"
                and monitor["spec"]["selector"]["matchLabels"].items() <= d["metadata"]["labels"].items()}
    assert set(selected) == {"streamrec-shard", "streamrec-trainer", "streamrec-api"}
    for name, service in selected.items():  # each Service's metrics port reaches the port its pods serve /metrics on
        port = next(p for p in service["spec"]["ports"] if p["name"] == endpoint["port"])
        (workload,) = [d for d in docs if d["kind"] in ("Deployment", "StatefulSet")
                       and service["spec"]["selector"].items() <= d["spec"]["template"]["metadata"]["labels"].items()]
        template = workload["spec"]["template"]
        container = template["spec"]["containers"][0]
        target = {p["name"]: p["containerPort"] for p in container["ports"]}[port["targetPort"]]
        assert target == int(template["metadata"]["annotations"]["prometheus.io/port"]), name

    rules_file = tmp_path / "alerts.yml"
    groups = [{"name": "streamrec", "rules": [{"alert": "StreamrecLagGrowing", "expr": "deriv(x[10m]) > 0",
                                               "for": "15m", "labels": {"severity": "warning"},
                                               "annotations": {"summary": "lag {{ $value }}"}}]}]
    rules_file.write_text(yaml.safe_dump({"groups": groups}))
    values = _values(monitoring={"alert_rules_file": "alerts.yml", "labels": {"release": "kps"}})
    with_rules = render(values, values_file=tmp_path / "values.yaml")
    (rule,) = [d for d in _objects(with_rules, "monitoring") if d["kind"] == "PrometheusRule"]
    assert rule["apiVersion"] == "monitoring.coreos.com/v1" and rule["metadata"]["labels"]["release"] == "kps"
    assert rule["spec"]["groups"] == groups  # read from the file, not copied
    for group in rule["spec"]["groups"]:
        assert group["name"] and all(("alert" in r) != ("record" in r) and r["expr"] for r in group["rules"])
    assert "prometheusrule.yaml" in yaml.safe_load(with_rules["monitoring/kustomization.yaml"])["resources"]
    without = render(values, values_file=tmp_path / "elsewhere" / "values.yaml")
    assert "monitoring/prometheusrule.yaml" not in without
    rules_file.write_text("rules: []\n")
    with pytest.raises(ConfigError):
        render(values, values_file=tmp_path / "values.yaml")


def test_generated_secrets_come_from_files_beside_the_kustomization() -> None:
    files = render(_values(secrets={"generate": True}), values_file=VALUES_FILE)
    (generator,) = yaml.safe_load(files["base/kustomization.yaml"])["secretGenerator"]
    assert generator["name"] == "streamrec-secrets"
    assert {f.split("=")[0] for f in generator["files"]} == {"admin-token", "ps-secret"}
    default = render(_values(), values_file=VALUES_FILE)
    assert "secretGenerator" not in yaml.safe_load(default["base/kustomization.yaml"])


def test_the_command_writes_checks_and_removes_what_is_no_longer_rendered(tmp_path: Path,
                                                                          capfd: pytest.CaptureFixture[str]) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(VALUES_FILE.read_text())
    out = tmp_path / "k8s"
    assert main(["deploy", "render", "--values", str(values), "--out", str(out), "--check"]) == 1
    assert main(["deploy", "render", "--values", str(values), "--out", str(out)]) == 0
    assert main(["deploy", "render", "--values", str(values), "--out", str(out), "--check"]) == 0
    assert (out / "base" / "storage.yaml").is_file()
    values.write_text(VALUES_FILE.read_text().replace("kind: volume", "kind: object_store\n  object_store_root: s3://b/s"))
    assert main(["deploy", "render", "--values", str(values), "--out", str(out), "--check"]) == 1
    assert f"stale: {out / 'base' / 'storage.yaml'}" in capfd.readouterr().err
    assert main(["deploy", "render", "--values", str(values), "--out", str(out)]) == 0
    assert not (out / "base" / "storage.yaml").exists()
    values.write_text(VALUES_FILE.read_text().replace("registry: registry.example.com/ml", "registry: ''"))
    assert main(["deploy", "render", "--values", str(values), "--out", str(out)]) == 2  # named, nothing written
    assert "image.registry" in capfd.readouterr().err


# ---------------------------------------------------------------- the image


def _dockerfile() -> list[str]:
    return [ln.strip() for ln in (REPO / "deploy" / "Dockerfile").read_text().splitlines()
            if ln.strip() and not ln.strip().startswith("#")]


def test_the_image_installs_with_the_constraints_and_ships_numbas_cache() -> None:
    lines = _dockerfile()
    text = " ".join(lines)
    cache = re.search(r"NUMBA_CACHE_DIR=(\S+)", text).group(1)
    assert not cache.startswith("/tmp") and "NUMBA_CPU_NAME=" in text  # portable across the nodes' CPUs
    assert re.search(r"pip install --constraint /opt/streamrec/constraints\.txt", text)
    assert any(ln.startswith("COPY") and "deploy/constraints.txt" in ln and "deploy/warm-kernels.sh" in ln
               for ln in lines)
    # the kernels are compiled by the user the pods run as, after the install, into the shipped cache
    user = next(i for i, ln in enumerate(lines) if ln.startswith("USER "))
    warm = next(i for i, ln in enumerate(lines) if "warm-kernels.sh" in ln and ln.startswith("RUN"))
    install = next(i for i, ln in enumerate(lines) if "pip install" in ln)
    assert install < user < warm
    assert "chown streamrec:streamrec /data \"$NUMBA_CACHE_DIR\"" in text
    script = (REPO / "deploy" / "warm-kernels.sh").read_text()
    models = re.search(r"for model in ([^;]+);", script).group(1).split()
    assert set(models) == {"lr", "wide_deep", "deepfm", "two_tower"}
    assert 'cd "$work"' in script  # not the source tree: the installed packages key the cache
    command = re.search(r"streamrec (train-files [^>\n]*)", script.replace("\\\n", "")).group(1)
    for model in models:  # real flags and a real model type
        argv = shlex.split(command.replace('"$model"', model).replace('"$work/$model"', "w"))
        assert build_parser().parse_args(argv).model == model


def _runtime_closure() -> set[str]:
    """Every distribution streamrec[s3,parquet] installs, as this venv resolved it."""
    from importlib.metadata import distribution

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    todo = [Requirement(r) for r in [*project["dependencies"], *project["optional-dependencies"]["s3"],
                                     *project["optional-dependencies"]["parquet"]]]
    seen: set[str] = set()
    while todo:
        req = todo.pop()
        key = canonicalize_name(req.name)
        if key in seen:
            continue
        seen.add(key)
        for text in distribution(req.name).requires or []:
            sub = Requirement(text)
            if sub.marker is None or any(sub.marker.evaluate({"extra": e}) for e in ("", *req.extras)):
                todo.append(sub)
    return seen


def test_the_constraints_pin_every_runtime_package_within_the_projects_bounds() -> None:
    lines = [ln for ln in (REPO / "deploy" / "constraints.txt").read_text().splitlines() if ln and ln[0] != "#"]
    pins = {canonicalize_name(name): version for name, version in (ln.split("==") for ln in lines)}
    missing = _runtime_closure() - pins.keys()
    assert not missing, f"run .venv/bin/python deploy/freeze_constraints.py > deploy/constraints.txt ({missing})"
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    for text in project["dependencies"]:
        req = Requirement(text)
        assert req.specifier.contains(pins[canonicalize_name(req.name)], prereleases=True), text
