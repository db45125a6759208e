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
