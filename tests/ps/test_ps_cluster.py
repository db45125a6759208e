"""Cluster roles from STREAMREC_* variables and from TF_CONFIG."""

from __future__ import annotations

import json

import pytest

from core.errors import ConfigError
from ps.cluster import ClusterSpec, cluster_env, cluster_from_env


def test_our_variables_round_trip() -> None:
    spec = ClusterSpec(role="worker", rank=1, shard_endpoints=("tcp://127.0.0.1:7000", "tcp://127.0.0.1:7001"),
                       num_workers=3, mode="sync", ps_config="/x/ps.yaml")
    assert cluster_from_env(cluster_env(spec)) == spec


def test_a_worker_without_a_rank_claims_one_by_lease() -> None:
    base = {"STREAMREC_ROLE": "worker", "STREAMREC_SHARD_ENDPOINTS": "a:1", "STREAMREC_NUM_WORKERS": "3"}
    auto = cluster_from_env({**base, "STREAMREC_RANK": "auto", "STREAMREC_HOLDER_ID": "pod-x",
                             "STREAMREC_ADVERTISE_HOST": "10.0.0.7"})
    assert auto.leased_rank and auto.rank_lease_ttl_s == 15.0 and auto.holder() == "pod-x"
    assert auto.advertise_host == "10.0.0.7"
    ttl_only = cluster_from_env({**base, "STREAMREC_RANK_LEASE_TTL": "4"})
    assert ttl_only.leased_rank and ttl_only.rank_lease_ttl_s == 4.0 and ":" in ttl_only.holder()
    assert cluster_from_env(cluster_env(auto)) == auto
    assert not cluster_from_env({**base, "STREAMREC_RANK": "2"}).leased_rank


def test_host_port_endpoints_are_normalized() -> None:
    env = {"STREAMREC_ROLE": "server", "STREAMREC_RANK": "1", "STREAMREC_SHARD_ENDPOINTS": "a:1, b:2"}
    spec = cluster_from_env(env)
    assert spec.shard_endpoints == ("tcp://a:1", "tcp://b:2") and spec.role == "server" and spec.rank == 1


def test_tf_config_is_accepted_as_is() -> None:
    cluster = {"chief": ["c:1"], "worker": ["w0:1", "w1:1"], "ps": ["p0:2", "p1:2"]}
    tf = {"TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": "worker", "index": 1}}),
          "STREAMREC_PS_MODE": "geo"}
    spec = cluster_from_env(tf)
    assert (spec.role, spec.rank, spec.num_workers, spec.mode) == ("worker", 2, 3, "geo")
    assert spec.shard_endpoints == ("tcp://p0:2", "tcp://p1:2")
    chief = cluster_from_env({"TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": "chief", "index": 0}})})
    assert (chief.role, chief.rank) == ("worker", 0)
    ps = cluster_from_env({"TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": "ps", "index": 1}})})
    assert (ps.role, ps.rank) == ("server", 1)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({}, "no cluster spec"),
        ({"TF_CONFIG": "{not json"}, "TF_CONFIG is not a valid"),
        ({"TF_CONFIG": json.dumps({"cluster": {"ps": ["a:1"]}, "task": {"type": "evaluator"}})}, "evaluator"),
        ({"STREAMREC_ROLE": "worker", "STREAMREC_SHARD_ENDPOINTS": "a:1", "STREAMREC_RANK": "x"}, "STREAMREC_RANK"),
        ({"STREAMREC_ROLE": "worker"}, "shard_endpoints"),
        ({"STREAMREC_ROLE": "boss", "STREAMREC_SHARD_ENDPOINTS": "a:1"}, "role"),
        ({"STREAMREC_ROLE": "worker", "STREAMREC_SHARD_ENDPOINTS": "nohost"}, "needs a port"),
        ({"STREAMREC_ROLE": "server", "STREAMREC_SHARD_ENDPOINTS": "a:1", "STREAMREC_RANK": "auto"}, "for workers"),
        ({"STREAMREC_ROLE": "worker", "STREAMREC_SHARD_ENDPOINTS": "a:1", "STREAMREC_RANK_LEASE_TTL": "soon"},
         "number of seconds"),
        ({"STREAMREC_ROLE": "worker", "STREAMREC_SHARD_ENDPOINTS": "a:1", "STREAMREC_RANK_LEASE_TTL": "0"},
         "rank_lease_ttl_s"),
    ],
)
def test_bad_specs_are_named(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        cluster_from_env(env)
