"""The one values file of the Kubernetes deployment (``deploy/k8s/values.yaml``): what a cluster
admin chooses, each choice once. :mod:`launcher.k8s_render` turns it into the Kustomize base
and the monitoring overlay; the shard and trainer counts, the image and the Kafka address are
written from here into every manifest that needs them, so none has to agree with another by hand.
"""

from __future__ import annotations

import enum
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from pydantic import Field, model_validator

from core.yaml_config import FrozenModel, load_yaml

# the StatefulSet controller labels each pod with its ordinal from this version on
POD_INDEX_LABEL_SINCE = "1.28"
# the oldest Kubernetes whose schemas the tests validate the manifests against
OLDEST_VALIDATED = "1.25"


def _package_version() -> str:
    try:
        return version("streamrec")
    except PackageNotFoundError:  # a source tree that was never installed
        return "0.0.0"


class PullPolicy(enum.StrEnum):
    ALWAYS = "Always"
    IF_NOT_PRESENT = "IfNotPresent"
    NEVER = "Never"


class ImageValues(FrozenModel):
    registry: str = Field("", description="Registry (and path) the image is pushed to, e.g. "
                                          "`registry.example.com/ml`; required, so no pod pulls a bare name from "
                                          "Docker Hub.")
    repository: str = Field("streamrec", min_length=1, description="Image name inside the registry.")
    tag: str = Field(default_factory=_package_version, min_length=1,
                     description="Image tag; default: the installed streamrec version.")
    digest: str | None = Field(None, pattern=r"^sha256:[0-9a-f]{64}$",
                               description="Pin the image by digest (`sha256:...`); the tag is then only a label.")
    pull_policy: PullPolicy = Field(PullPolicy.IF_NOT_PRESENT, description="The containers' `imagePullPolicy`.")
    pull_secrets: tuple[str, ...] = Field((), description="Names of existing Secrets the kubelet pulls the image "
                                                          "with (`imagePullSecrets`).")

    @property
    def reference(self) -> str:
        """``registry/repository:tag`` (or ``@digest``), what every container runs."""
        name = f"{self.registry.rstrip('/')}/{self.repository}"
        return f"{name}@{self.digest}" if self.digest else f"{name}:{self.tag}"


class KafkaValues(FrozenModel):
    bootstrap_servers: tuple[str, ...] = Field(
        (), description="host:port of the Kafka brokers; left out: `kafka.<namespace>.svc.cluster.local:9092`, a "
                        "Kafka Service named `kafka` in the release's namespace.")
    credentials_secret: str | None = Field(
        None, description="Secret whose keys the trainers read as environment variables: "
                          "`STREAMREC_KAFKA_SASL_USERNAME`, `STREAMREC_KAFKA_SASL_PASSWORD`, "
                          "`STREAMREC_KAFKA_SSL_PASSWORD` (with `kafka.security_protocol` and `kafka.sasl_mechanism` "
                          "in config); required in the pods when set.")


class StorageKind(enum.StrEnum):
    VOLUME = "volume"
    OBJECT_STORE = "object_store"


class StorageValues(FrozenModel):
    kind: StorageKind = Field(StorageKind.VOLUME,
                              description="`volume`: one ReadWriteMany claim mounted at /data by every pod; "
                                          "`object_store`: checkpoints and exports under `object_store_root`, /data "
                                          "is per-pod scratch.")
    claim_name: str = Field("streamrec-data", description="Name of the PersistentVolumeClaim (kind `volume`).")
    storage_class: str | None = Field(None, description="StorageClass of the claim; left out: the cluster's "
                                                        "default class (which must offer ReadWriteMany).")
    size: str = Field("100Gi", description="Requested size of the claim.")
    object_store_root: str | None = Field(None, description="fsspec URL under which checkpoints/ and exports/ live "
                                                            "(kind `object_store`), e.g. `s3://bucket/streamrec`.")
    object_store_secret: str = Field("streamrec-object-store",
                                     description="Secret with the AWS variables every pod reads (kind "
                                                 "`object_store`; optional in the pods, so IRSA works without it).")

    @model_validator(mode="after")
    def _root_for_object_store(self) -> StorageValues:
        if self.kind is StorageKind.OBJECT_STORE and "://" not in (self.object_store_root or ""):
            raise ValueError("storage.object_store_root: a URL such as s3://bucket/streamrec is required with "
                             "kind object_store")
        return self

    def root(self, name: str) -> str:
        """Where ``checkpoints`` or ``exports`` live."""
        if self.kind is StorageKind.OBJECT_STORE:
            return f"{(self.object_store_root or '').rstrip('/')}/{name}"
        return f"/data/{name}"


class DiskTierValues(FrozenModel):
    """Node-local scratch for the shards' disk tiers: an emptyDir per shard pod (a tier file starts
    empty in every process; the pass saves on ``storage`` hold the rows)."""

    size_limit: str = Field("200Gi", description="The emptyDir's sizeLimit: keep it above the sum of the tables' "
                                                 "`tier.disk.max_bytes`, or the kubelet evicts the pod.")


class SecretsValues(FrozenModel):
    name: str = Field("streamrec-secrets", description="Secret with the keys `admin-token` (the REST admin API) "
                                                       "and `ps-secret` (the shards' HMAC key, >= 16 bytes).")
    generate: bool = Field(False, description="true: the base's kustomization generates that Secret from the files "
                                              "`secrets/admin-token` and `secrets/ps-secret` beside it (kept out of "
                                              "git); false: it must exist before the pods start.")


class Quantities(FrozenModel):
    cpu: str | None = Field(None, description="CPU (`2`, `500m`); null: none set.")
    memory: str | None = Field(None, description="Memory (`4Gi`); null: none set.")


class RoleResources(FrozenModel):
    requests: Quantities = Field(Quantities(), description="What the scheduler reserves for the container.")
    limits: Quantities = Field(Quantities(), description="The container's ceiling (memory: OOM-killed above it).")


def _role(cpu: str, memory: str, cpu_limit: str, memory_limit: str) -> RoleResources:
    return RoleResources(requests=Quantities(cpu=cpu, memory=memory), limits=Quantities(cpu=cpu_limit,
                                                                                        memory=memory_limit))


def _said(res: RoleResources) -> str:
    return (f"default: requests cpu {res.requests.cpu}, memory {res.requests.memory}; limits cpu {res.limits.cpu}, "
            f"memory {res.limits.memory}")


SHARD_RESOURCES = _role("1", "4Gi", "2", "8Gi")
TRAINER_RESOURCES = _role("2", "4Gi", "4", "8Gi")
API_RESOURCES = _role("1", "2Gi", "2", "4Gi")


class ResourcesValues(FrozenModel):
    shard: RoleResources = Field(SHARD_RESOURCES,
                                 description="Each shard: its tables live in memory, so its memory limit bounds "
                                             f"`ps.shard_bytes` ({_said(SHARD_RESOURCES)}).")
    trainer: RoleResources = Field(TRAINER_RESOURCES, description=f"Each trainer ({_said(TRAINER_RESOURCES)}).")
    api: RoleResources = Field(API_RESOURCES, description="Each API replica: it holds the served bundle and its "
                                                          f"vector index ({_said(API_RESOURCES)}).")


class DisruptionValues(FrozenModel):
    enabled: bool = Field(True, description="A PodDisruptionBudget per role (shards, trainers, API).")
    max_unavailable: int = Field(1, ge=1, description="Pods of one role a voluntary disruption (a node drain) may "
                                                      "take at once.")


class AntiAffinity(enum.StrEnum):
    OFF = "off"
    PREFERRED = "preferred"
    REQUIRED = "required"


class AffinityValues(FrozenModel):
    node_selector: dict[str, str] = Field(default_factory=dict,
                                          description="Node labels every pod requires (`nodeSelector`), e.g. "
                                                      "`node-pool: training`.")
    tolerations: tuple[dict[str, Any], ...] = Field((), description="Kubernetes tolerations every pod carries, as "
                                                                    "written in a pod spec (`key`, `operator`, "
                                                                    "`value`, `effect`).")
    priority_class: str | None = Field(None, description="An existing PriorityClass of every pod "
                                                         "(`priorityClassName`).")
    anti_affinity: AntiAffinity = Field(AntiAffinity.PREFERRED,
                                        description="Spread each role's pods over `topology_key`: `preferred` (the "
                                                    "scheduler tries), `required` (a pod stays pending rather than "
                                                    "share) or `off`.")
    topology_key: str = Field("kubernetes.io/hostname", description="The node label that spreads pods apart.")


class ShardIndexSource(enum.StrEnum):
    POD_INDEX_LABEL = "pod_index_label"
    HOSTNAME = "hostname"


class MonitoringValues(FrozenModel):
    labels: dict[str, str] = Field(default_factory=dict,
                                   description="Extra labels on the ServiceMonitor and PrometheusRule, e.g. "
                                               "`release: kube-prometheus-stack`, for the Prometheus Operator's "
                                               "selectors.")
    interval: str = Field("30s", description="The ServiceMonitor's scrape interval.")
    alert_rules_file: str = Field("../prometheus/alerts.yml",
                                  description="The Prometheus rule file the PrometheusRule wraps, relative to the "
                                              "values file; no PrometheusRule is rendered while it does not exist.")


class DeployValues(FrozenModel):
    namespace: str = Field("streamrec", pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
                           description="Namespace of every object (the kustomization sets it too).")
    image: ImageValues = Field(ImageValues(), description="The one image every role runs.")
    shards: int = Field(2, ge=1, description="Parameter-server shards: the StatefulSet's replicas and the trainers' "
                                             "shard list.")
    trainers: int = Field(2, ge=1, description="Trainers (workers): the Deployment's replicas and every trainer's "
                                               "worker count.")
    api_replicas: int = Field(1, ge=1, description="Replicas of the serving API.")
    shard_index: ShardIndexSource = Field(
        ShardIndexSource.POD_INDEX_LABEL,
        description="Where a shard reads its index: `pod_index_label` (the StatefulSet's "
                    f"`apps.kubernetes.io/pod-index` label, Kubernetes >= {POD_INDEX_LABEL_SINCE}) or `hostname` "
                    "(the ordinal suffix of the pod name, through a shell: for older clusters).")
    kafka: KafkaValues = Field(KafkaValues(), description="Where the trainers read records.")
    storage: StorageValues = Field(StorageValues(), description="Where checkpoints and exports live.")
    disk_tier: DiskTierValues | None = Field(
        None, description="A volume at `/var/lib/streamrec-tier` in every shard pod for the tables' disk tiers "
                          "(`ps.tables.<name>.tier.disk.path` must lie under it); left out, no tier may be configured.")
    secrets: SecretsValues = Field(SecretsValues(), description="The admin token and the PS secret.")
    resources: ResourcesValues = Field(ResourcesValues(), description="Requests and limits per role.")
    disruption: DisruptionValues = Field(DisruptionValues(), description="PodDisruptionBudgets.")
    affinity: AffinityValues = Field(AffinityValues(), description="Where the pods run: node selector, "
                                                                   "tolerations, priority and each role's "
                                                                   "anti-affinity.")
    monitoring: MonitoringValues = Field(MonitoringValues(),
                                         description="The monitoring overlay: ServiceMonitor and PrometheusRule "
                                                     "(Prometheus Operator CRDs).")
    config: dict[str, Any] = Field(
        default_factory=dict,
        description="The streamrec YAML (see configuration.md) in the ConfigMap; `kafka.bootstrap_servers`, "
                    "`train.checkpoint_dir`, `train.export_dir`, `train.control_endpoint`, `service.job_control_file` "
                    "and `service.exports_dir` come from the keys above and may not be set here.")

    @model_validator(mode="after")
    def _registry_required(self) -> DeployValues:
        if not self.image.registry.strip("/"):
            raise ValueError("image.registry: the registry the image is pushed to is required (a bare image name "
                             "would be pulled from Docker Hub)")
        return self

    @property
    def minimum_kubernetes(self) -> str:
        """The oldest Kubernetes these values render for."""
        return POD_INDEX_LABEL_SINCE if self.shard_index is ShardIndexSource.POD_INDEX_LABEL else OLDEST_VALIDATED

    @property
    def bootstrap_servers(self) -> tuple[str, ...]:
        return self.kafka.bootstrap_servers or (f"kafka.{self.namespace}.svc.cluster.local:9092",)


def load_values(path: str | Path) -> DeployValues:
    """The values file at ``path`` (every key defaulted, unknown keys refused)."""
    return load_yaml(path, DeployValues)
