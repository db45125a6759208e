"""Virtual-shard routing against a slow reference, the default placement against the routing
of saves from before placements, and dense arrays cut anew over another shard count."""

from __future__ import annotations

import numpy as np
import pytest

from core.errors import Conflict, CorruptData
from ps.placement import VIRTUAL_SHARDS, Placement, default_placement, placement_for
from ps.routing import ROUTING_SALT, plan_keys, route_keys, shard_of, shard_of_key
from ps.shard_replace import _cut_dense
from tables.dense_table import DenseTable
from tables.table_config import DenseTableConfig, OptimizerConfig

M64 = (1 << 64) - 1


def _h32(key: int) -> int:
    """MurmurHash3's fmix64 of the salted key, high 32 bits, in plain ints."""
    z = key ^ int(ROUTING_SALT)
    for mul in (0xFF51AFD7ED558CCD, 0xC4CEB9FE1A85EC53):
        z ^= z >> 33
        z = (z * mul) & M64
    return (z ^ (z >> 33)) >> 32


KEYS = np.random.default_rng(3).integers(0, 2**64 - 1, 5000, dtype=np.uint64, endpoint=True)


@pytest.mark.parametrize("n", [1, 2, 4, 8])
def test_the_default_placement_of_a_power_of_two_routes_as_the_shard_count_did(n: int) -> None:
    np.testing.assert_array_equal(shard_of(KEYS, n), [_h32(int(k)) % n for k in KEYS])


def test_a_placement_routes_each_key_by_its_virtual_shard() -> None:
    table = np.random.default_rng(1).integers(0, 5, VIRTUAL_SHARDS).astype(np.int32)
    placement = Placement(table, 5, 7)
    want = np.array([table[_h32(int(k)) % VIRTUAL_SHARDS] for k in KEYS])
    np.testing.assert_array_equal(shard_of(KEYS, placement), want)
    assert [shard_of_key(int(k), placement) for k in KEYS[:200]] == want[:200].tolist()
    plan = plan_keys(np.concatenate([KEYS, KEYS[:100]]), placement)
    for s in range(5):
        np.testing.assert_array_equal(np.sort(plan.keys[plan.shard_slice(s)]), np.sort(KEYS[want == s]))
    grouped, position, offsets = route_keys(KEYS, placement)
    np.testing.assert_array_equal(grouped[position], KEYS)
    for s in range(5):
        assert (want[np.isin(KEYS, grouped[offsets[s]:offsets[s + 1]])] == s).all()


def test_another_shard_count_gets_the_default_placement_one_version_on() -> None:
    saved = Placement(default_placement(2).table, 2, 3)
    assert placement_for(saved, 2) is saved
    moved = placement_for(saved, 3)
    assert moved.version == 4 and moved.n_shards == 3 and moved.same_table(default_placement(3))
    assert Placement.from_meta(moved.to_meta(), "x").same_table(moved)


def test_a_malformed_or_foreign_placement_is_refused_by_name() -> None:
    meta = default_placement(2).to_meta()
    with pytest.raises(CorruptData, match=r"pass\.json: malformed shard placement"):
        Placement.from_meta({**meta, "table": [5] * VIRTUAL_SHARDS}, "pass.json")
    with pytest.raises(Conflict, match="placement of 1000 virtual shards"):
        Placement.from_meta({**meta, "virtual_shards": 1000}, "pass.json")


GRAD = np.linspace(-1, 1, 100).astype(np.float32)


def _part(name: str, value: np.ndarray, a: int = 0) -> tuple[dict, dict]:
    opt = OptimizerConfig(kind="adam", lr=0.01)
    table = DenseTable(DenseTableConfig(name=name, optimizer=opt), initial=value)
    table.push(GRAD[a:a + value.shape[0]])
    return {"size": value.shape[0], "optimizer": opt.model_dump()}, table.snapshot()


def test_a_sliced_dense_array_is_put_together_and_cut_again_for_the_new_count() -> None:
    whole = np.arange(100, dtype=np.float32)
    ref = _part("w", whole)[1]
    old = {}
    for i, (a, b) in enumerate(((0, 33), (33, 67), (67, 100))):
        meta, snap = _part(f"w.slice{i}of3", whole[a:b], a)
        old[f"w.slice{i}of3"] = (meta, snap)
    got = {}
    for s in range(2):
        got |= _cut_dense(old, 2, s, 10)
    assert sorted(got) == ["w.slice0of2", "w.slice1of2"]
    value = np.concatenate([got[p][1].pull() for p in sorted(got)])
    np.testing.assert_array_equal(value, ref["value"])
    for k in ("m", "v"):
        np.testing.assert_array_equal(np.concatenate([got[p][1].snapshot()["state"][k] for p in sorted(got)]),
                                      ref["state"][k])
    assert _cut_dense(old, 1, 0, 10)["w"][0]["size"] == 100  # one shard: whole again
