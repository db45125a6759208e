"""bench/scale.py's ratios: each row against the 1-worker row of its own shard count, and a speed-up
only where every worker and shard has a core."""

from __future__ import annotations

from bench.scale import add_ratios


def _row(shards: int, workers: int, samples_per_s: float, auc: float, loop_us: float) -> dict:
    return {"shards": shards, "workers": workers, "samples_per_s": samples_per_s, "test_auc": auc,
            "cpu_us_per_sample": {"loop_total": loop_us}}


def test_rows_are_compared_with_the_one_worker_row_of_their_shard_count() -> None:
    rows = [_row(1, 1, 1000, 0.70, 40), _row(1, 2, 1800, 0.69, 44), _row(1, 16, 2000, 0.68, 60),
            _row(2, 1, 1100, 0.71, 50), _row(2, 4, 1500, 0.705, 50)]
    add_ratios(rows, cores=4)
    one, two, sixteen, two_shards_one, two_shards_four = rows
    assert one["speedup"] == 1.0 and one["auc_minus_1_worker"] == 0.0
    assert two["speedup"] == 1.8 and two["auc_minus_1_worker"] == -0.01
    assert two["cpu_per_sample_over_1_worker"] == 1.1
    assert sixteen["speedup"] is None  # 17 processes on 4 cores: CPU per sample, not a speed-up
    assert sixteen["cpu_per_sample_over_1_worker"] == 1.5
    assert two_shards_one["auc_minus_1_worker"] == 0.0
    assert two_shards_four["auc_minus_1_worker"] == -0.005 and two_shards_four["speedup"] is None


def test_a_shard_count_without_its_one_worker_row_gets_no_ratios() -> None:
    rows = [_row(4, 8, 1000, 0.7, 40)]
    add_ratios(rows, cores=32)
    assert "speedup" not in rows[0] and "auc_minus_1_worker" not in rows[0]


def test_a_shard_keeps_up_with_the_workers_whose_cpu_per_sample_its_own_covers() -> None:
    from bench.scale import shard_capacity

    # 1M samples, 30M keys served with 5 us of shard CPU per sample (5 s): 6M keys per CPU second; a worker
    # at 30 us per sample trains 33k samples/s, a shard serves 200k: one shard keeps up with 6 workers
    got = shard_capacity(30_000_000, 1_000_000, workers_us=30.0, shard_us=5.0)
    assert got == {"keys_per_sample": 30.0, "shard_keys_per_cpu_s": 6_000_000, "workers_per_shard": 6.0}
    assert shard_capacity(0, 1_000_000, workers_us=30.0, shard_us=5.0)["workers_per_shard"] is None


def test_the_advice_adds_a_shard_per_the_fewest_workers_one_shard_kept_up_with() -> None:
    from bench.scale import add_shards_advice

    rows = [{"workers_per_shard": 6.6, "keys_per_sample": 30.0, "shard_keys_per_cpu_s": 6e6},
            {"workers_per_shard": 7.9, "keys_per_sample": 31.0, "shard_keys_per_cpu_s": 7e6},
            {"workers_per_shard": None}]
    advice = add_shards_advice(rows)
    assert advice is not None and advice.endswith("add a shard per 6 workers")
    assert "6.0-7.0M keys per CPU second" in advice and "6.6-7.9 workers" in advice
    assert add_shards_advice([{"workers_per_shard": None}]) is None
