"""The three workloads of the Kubernetes base, built from :class:`launcher.k8s_values.DeployValues`:
the shards' StatefulSet, the trainers' Deployment and the API's Deployment, each with its Service.

Probes: liveness asks the process itself (its own ``/metrics`` or ``/healthz``), so a pod is
restarted only when it is wedged; what it depends on (shards and Kafka for a trainer, a loaded
bundle for the API) is asked by readiness alone, so a shard that is down for a while leaves the
trainers running, not ready, and they go on when it is back. A startup probe covers the time a
role needs before it serves (a shard's restore, a trainer's wait for its rank lease).
"""

from __future__ import annotations

from typing import Any

from launcher.k8s_values import AntiAffinity, DeployValues, RoleResources, ShardIndexSource, StorageKind

PS_PORT = 7000
METRICS_PORT = 9100
API_PORT = 8000
API_SERVICE_PORT = 80
CONTROL_PORT = 7100
RANK_LEASE_TTL_S = 15  # a dead trainer's rank is free after this
# a shard restoring a large save; a trainer waiting for shard 0 or a free rank, which it does for up
# to trainer.rank_claim.CLAIM_TIMEOUT_S before it exits by itself
STARTUP_LIMIT_S = 3900
STARTUP_PERIOD_S = 10
RUN_DIR = "/run/streamrec"
CONFIG_DIR = "/etc/streamrec"
SECRETS_DIR = "/etc/streamrec-secrets"
TIER_DIR = "/var/lib/streamrec-tier"  # the shards' disk tier volume (values disk_tier)
PS_SECRET_FILE = f"{SECRETS_DIR}/ps-secret"
POD_INDEX_FIELD = "metadata.labels['apps.kubernetes.io/pod-index']"
CONFIG_CHECKSUM = "streamrec.io/config-checksum"

# a trainer is ready while it reaches every shard and at least one Kafka broker (its arguments:
# the two comma-separated host:port lists); readiness only, so an outage never restarts it
REACH_SCRIPT = """\
import socket, sys
def up(address):
    host, port = address.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), 3).close()
        return True
    except OSError:
        return False
shards, brokers = (arg.split(",") for arg in sys.argv[1:3])
sys.exit(0 if all(map(up, shards)) and any(map(up, brokers)) else 1)
"""


def labels(component: str | None = None) -> dict[str, str]:
    out = {"app.kubernetes.io/name": "streamrec"}
    return out if component is None else {**out, "app.kubernetes.io/component": component}


def meta(name: str, values: DeployValues, component: str | None = None) -> dict[str, Any]:
    return {"name": name, "namespace": values.namespace, "labels": labels(component)}


def shard_endpoints(values: DeployValues) -> list[str]:
    """``streamrec-shard-<i>.streamrec-shard:7000`` for every shard, in index order."""
    return [f"streamrec-shard-{i}.streamrec-shard:{PS_PORT}" for i in range(values.shards)]


def _resources(res: RoleResources) -> dict[str, dict[str, str]]:
    out = {}
    for key, q in (("requests", res.requests), ("limits", res.limits)):
        set_ = {k: v for k, v in (("cpu", q.cpu), ("memory", q.memory)) if v is not None}
        if set_:
            out[key] = set_
    return out


def _affinity(values: DeployValues, component: str) -> dict[str, Any] | None:
    mode = values.affinity.anti_affinity
    if mode is AntiAffinity.OFF:
        return None
    term = {"labelSelector": {"matchLabels": labels(component)}, "topologyKey": values.affinity.topology_key}
    if mode is AntiAffinity.REQUIRED:
        return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    return {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 100, "podAffinityTerm": term}]}}


def _http_probe(path: str, port: str, *, period_s: int, failures: int) -> dict[str, Any]:
    return {"httpGet": {"path": path, "port": port}, "periodSeconds": period_s, "timeoutSeconds": 5,
            "failureThreshold": failures}


def _startup_probe(path: str, port: str) -> dict[str, Any]:
    return _http_probe(path, port, period_s=STARTUP_PERIOD_S, failures=STARTUP_LIMIT_S // STARTUP_PERIOD_S)


def _liveness(path: str, port: str) -> dict[str, Any]:
    # two minutes without an answer from the process's own HTTP thread: wedged
    return _http_probe(path, port, period_s=20, failures=6)


def _container(values: DeployValues, name: str, resources: RoleResources, mounts: list[dict[str, Any]],
               **spec: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "image": values.image.reference,
                           "imagePullPolicy": values.image.pull_policy.value, **spec}
    if values.storage.kind is StorageKind.OBJECT_STORE:
        out["envFrom"] = [{"secretRef": {"name": values.storage.object_store_secret, "optional": True}}]
    out["resources"] = _resources(resources)
    out["securityContext"] = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    out["volumeMounts"] = mounts
    return out


def _pod(values: DeployValues, component: str, container: dict[str, Any], resources: RoleResources,
         config_checksum: str, *, secret_items: list[str]) -> dict[str, Any]:
    """A pod template: the render-config init container, ``container``, and the volumes both mount."""
    render = _container(values, "render-config", resources, [
        {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True}, {"name": "rendered", "mountPath": RUN_DIR}],
        args=["config", "render", "--config", f"{CONFIG_DIR}/streamrec.yaml", "--out", RUN_DIR])
    render.pop("envFrom", None)
    if values.storage.kind is StorageKind.VOLUME:
        data: dict[str, Any] = {"name": "data", "persistentVolumeClaim": {"claimName": values.storage.claim_name}}
    else:
        data = {"name": "data", "emptyDir": {}}
    spec: dict[str, Any] = {
        "securityContext": {"runAsNonRoot": True, "runAsUser": 10001, "runAsGroup": 10001, "fsGroup": 10001,
                            "seccompProfile": {"type": "RuntimeDefault"}},
    }
    placement = values.affinity
    if placement.node_selector:
        spec["nodeSelector"] = dict(placement.node_selector)
    if placement.tolerations:
        spec["tolerations"] = [dict(t) for t in placement.tolerations]
    if placement.priority_class is not None:
        spec["priorityClassName"] = placement.priority_class
    affinity = _affinity(values, component)
    if affinity is not None:
        spec["affinity"] = affinity
    if values.image.pull_secrets:
        spec["imagePullSecrets"] = [{"name": n} for n in values.image.pull_secrets]
    spec["initContainers"] = [render]
    spec["containers"] = [container]
    spec["volumes"] = [
        {"name": "config", "configMap": {"name": "streamrec-config"}},
        {"name": "rendered", "emptyDir": {}},
        {"name": "secrets", "secret": {"secretName": values.secrets.name,
                                       "items": [{"key": k, "path": k} for k in secret_items]}},
        data,
    ]
    port = API_PORT if component == "api" else METRICS_PORT
    return {"metadata": {"labels": labels(component), "annotations": {
        CONFIG_CHECKSUM: config_checksum,
        "prometheus.io/scrape": "true", "prometheus.io/port": str(port), "prometheus.io/path": "/metrics"}},
        "spec": spec}


_ROLE_MOUNTS = [{"name": "rendered", "mountPath": RUN_DIR, "readOnly": True},
                {"name": "secrets", "mountPath": SECRETS_DIR, "readOnly": True}]


def _shard_argv(values: DeployValues, index: str) -> list[str]:
    return ["shard", "--config", f"{RUN_DIR}/ps.yaml", "--index", index, "--host", "0.0.0.0", "--port", str(PS_PORT),
            "--checkpoint-dir", "/data/shards", "--secret-file", PS_SECRET_FILE, "--metrics-port", str(METRICS_PORT)]


def shards(values: DeployValues, config_checksum: str) -> list[dict[str, Any]]:
    """The shards' headless Service and StatefulSet: shard ``i`` is pod ``streamrec-shard-i``."""
    if values.shard_index is ShardIndexSource.POD_INDEX_LABEL:
        index = {"name": "SHARD_INDEX", "valueFrom": {"fieldRef": {"fieldPath": POD_INDEX_FIELD}}}
        run: dict[str, Any] = {"env": [index], "args": _shard_argv(values, "$(SHARD_INDEX)")}
    else:  # the ordinal is the pod name's suffix, which the shell cuts from HOSTNAME
        run = {"command": ["sh", "-c", "exec streamrec " + " ".join(_shard_argv(values, '"${HOSTNAME##*-}"'))]}
    mounts = [*_ROLE_MOUNTS, {"name": "data", "mountPath": "/data"}]
    if values.disk_tier is not None:
        mounts.append({"name": "tier", "mountPath": TIER_DIR})
    container = _container(
        values, "shard", values.resources.shard, mounts, **run,
        ports=[{"name": "ps", "containerPort": PS_PORT}, {"name": "metrics", "containerPort": METRICS_PORT}],
        startupProbe=_startup_probe("/metrics", "metrics"),
        readinessProbe={"tcpSocket": {"port": "ps"}, "periodSeconds": 5},
        livenessProbe=_liveness("/metrics", "metrics"))
    service = {"apiVersion": "v1", "kind": "Service", "metadata": meta("streamrec-shard", values, "shard"), "spec": {
        "clusterIP": "None", "publishNotReadyAddresses": True, "selector": labels("shard"),
        "ports": [{"name": "ps", "port": PS_PORT, "targetPort": "ps"},
                  {"name": "metrics", "port": METRICS_PORT, "targetPort": "metrics"}]}}
    pod = _pod(values, "shard", container, values.resources.shard, config_checksum, secret_items=["ps-secret"])
    if values.disk_tier is not None:  # node-local scratch: the tier's files start empty, the saves hold the rows
        pod["spec"]["volumes"].append({"name": "tier", "emptyDir": {"sizeLimit": values.disk_tier.size_limit}})
    sts = {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": meta("streamrec-shard", values, "shard"),
           "spec": {"serviceName": "streamrec-shard", "replicas": values.shards, "podManagementPolicy": "Parallel",
                    "selector": {"matchLabels": labels("shard")}, "template": pod}}
    return [service, sts]


def trainers(values: DeployValues, config_checksum: str) -> list[dict[str, Any]]:
    """The trainers' Deployment (ranks leased on shard 0, rank 0 the chief) and a headless Service
    for their metrics."""
    reach = [",".join(shard_endpoints(values)), ",".join(values.bootstrap_servers)]
    container = _container(
        values, "trainer", values.resources.trainer, [*_ROLE_MOUNTS, {"name": "data", "mountPath": "/data"}],
        args=["train", "--config", f"{RUN_DIR}/train.yaml", "--metrics-port", str(METRICS_PORT)],
        env=[
            {"name": "STREAMREC_ROLE", "value": "worker"},
            {"name": "STREAMREC_RANK", "value": "auto"},
            {"name": "STREAMREC_RANK_LEASE_TTL", "value": str(RANK_LEASE_TTL_S)},
            {"name": "STREAMREC_HOLDER_ID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "STREAMREC_ADVERTISE_HOST", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "STREAMREC_NUM_WORKERS", "value": str(values.trainers)},
            {"name": "STREAMREC_SHARD_ENDPOINTS", "value": ",".join(shard_endpoints(values))},
            {"name": "STREAMREC_PS_CONFIG", "value": f"{RUN_DIR}/ps.yaml"},
            {"name": "STREAMREC_PS_SECRET_FILE", "value": PS_SECRET_FILE},
            {"name": "OMP_NUM_THREADS", "value": "1"},
        ],
        ports=[{"name": "control", "containerPort": CONTROL_PORT}, {"name": "metrics", "containerPort": METRICS_PORT}],
        startupProbe=_startup_probe("/metrics", "metrics"),
        readinessProbe={"exec": {"command": ["python", "-c", REACH_SCRIPT, *reach]}, "periodSeconds": 10,
                        "timeoutSeconds": 10},
        livenessProbe=_liveness("/metrics", "metrics"))
    if values.kafka.credentials_secret is not None:
        container["envFrom"] = [*container.get("envFrom", []), {"secretRef": {"name": values.kafka.credentials_secret}}]
    service = {"apiVersion": "v1", "kind": "Service", "metadata": meta("streamrec-trainer", values, "trainer"),
               # not-ready trainers too: one waiting for a shard is the one whose metrics matter
               "spec": {"clusterIP": "None", "publishNotReadyAddresses": True, "selector": labels("trainer"),
                        "ports": [{"name": "metrics", "port": METRICS_PORT, "targetPort": "metrics"}]}}
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment",
                  "metadata": meta("streamrec-trainer", values, "trainer"),
                  "spec": {"replicas": values.trainers,
                           # a new pod can only start once an old one freed its rank: never surge past W
                           "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}},
                           "selector": {"matchLabels": labels("trainer")},
                           "template": _pod(values, "trainer", container, values.resources.trainer, config_checksum,
                                            secret_items=["ps-secret"])}}
    return [service, deployment]


def api(values: DeployValues, config_checksum: str, *, admin_token_env: str) -> list[dict[str, Any]]:
    """The serving API's Deployment (ready once a bundle is loaded) and its Service."""
    container = _container(
        values, "api", values.resources.api,
        [*_ROLE_MOUNTS, {"name": "data", "mountPath": "/data",
                         "readOnly": values.storage.kind is StorageKind.VOLUME}],
        args=["serve", "--config", f"{RUN_DIR}/service.yaml", "--host", "0.0.0.0", "--port", str(API_PORT)],
        env=[{"name": admin_token_env,
              "valueFrom": {"secretKeyRef": {"name": values.secrets.name, "key": "admin-token"}}}],
        ports=[{"name": "http", "containerPort": API_PORT}],
        startupProbe=_startup_probe("/healthz", "http"),
        readinessProbe={"httpGet": {"path": "/readyz", "port": "http"}, "periodSeconds": 5},
        livenessProbe=_liveness("/healthz", "http"))
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta("streamrec-api", values, "api"),
                  "spec": {"replicas": values.api_replicas, "selector": {"matchLabels": labels("api")},
                           "template": _pod(values, "api", container, values.resources.api, config_checksum,
                                            secret_items=["ps-secret"])}}
    service = {"apiVersion": "v1", "kind": "Service", "metadata": meta("streamrec-api", values, "api"), "spec": {
        "selector": labels("api"), "ports": [{"name": "http", "port": API_SERVICE_PORT, "targetPort": "http"},
                                             {"name": "metrics", "port": API_PORT, "targetPort": "http"}]}}
    return [deployment, service]
