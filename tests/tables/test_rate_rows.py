"""Rate rows of an id-rows table (``IdRowsTable.observe_rates``): the item-frequency estimate the
trainers share on the parameter servers, against models.item_frequency.ItemFrequency."""

from __future__ import annotations

import numpy as np
import pytest

from core.errors import InvalidInput
from models.item_frequency import ItemFrequency
from tables.id_rows_table import RATE_CLOCK_KEY, RATE_WORDS, IdRowsTable, id_rows_config

KEYS = np.arange(1, 41, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)  # 40 item hashes, none 0


def _steps(n: int, seed: int) -> list[np.ndarray]:
    """Steps of a skewed stream: some empty, repeats within a step."""
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, KEYS.shape[0] + 1) ** 1.2
    return [KEYS[rng.choice(KEYS.shape[0], size=rng.integers(0, 12), p=p / p.sum())] for _ in range(n)]


def _table() -> IdRowsTable:
    return IdRowsTable(id_rows_config("ids.item_frequency", RATE_WORDS))


def test_rate_rows_follow_the_reference_estimate_step_by_step() -> None:
    table = _table()
    ref = ItemFrequency(buckets=1 << 16, hashes=2, alpha=0.19)  # 40 keys in 65,536 buckets: no collision here
    query = np.r_[KEYS, np.array([12345], np.uint64)]  # and a key never observed
    for step in _steps(300, seed=1):
        ref.update(step)
        got = table.observe_rates(step, query, 0.19)
        np.testing.assert_allclose(got, ref.expected_count(query), rtol=1e-5)
    assert table.read(np.array([RATE_CLOCK_KEY], np.uint64))[0][0, 0] == 300  # the clock counted every step


def test_a_replayed_step_reads_without_counting_again() -> None:
    table = _table()
    for step in _steps(50, seed=2):
        table.observe_rates(step, KEYS[:0], 0.1)
    before = table.read(np.r_[np.array([RATE_CLOCK_KEY], np.uint64), KEYS])[0].copy()
    first = table.observe_rates(KEYS[:0], KEYS, 0.1, observe=False)
    np.testing.assert_array_equal(table.read(np.r_[np.array([RATE_CLOCK_KEY], np.uint64), KEYS])[0], before)
    np.testing.assert_array_equal(table.observe_rates(KEYS[:3], KEYS, 0.1, observe=False), first)


def test_the_clock_and_the_rates_survive_a_save_and_load(tmp_path) -> None:
    table, ref = _table(), ItemFrequency(buckets=1 << 16, hashes=2, alpha=0.1)
    steps = _steps(200, seed=3)
    for step in steps[:120]:
        table.observe_rates(step, KEYS[:0], 0.1)
        ref.update(step)
    table.save(tmp_path / "base")
    back = _table()
    back.load(tmp_path / "base")
    for step in steps[120:]:
        ref.update(step)
        got = back.observe_rates(step, KEYS, 0.1)
    np.testing.assert_allclose(got, ref.expected_count(KEYS), rtol=1e-5)


def test_bad_requests_are_refused_naming_what_was_wrong() -> None:
    table = _table()
    with pytest.raises(InvalidInput, match="clock"):
        table.observe_rates(np.array([RATE_CLOCK_KEY, 5], np.uint64), KEYS[:1], 0.1)
    with pytest.raises(InvalidInput, match="alpha"):
        table.observe_rates(KEYS[:2], KEYS[:1], 1.5)
    with pytest.raises(InvalidInput):
        table.observe_rates(np.array([1.5, 2.0]), KEYS[:1], 0.1)  # not uint64 keys
    with pytest.raises(InvalidInput, match="2 words"):
        IdRowsTable(id_rows_config("ids.history", 5)).observe_rates(KEYS[:2], KEYS[:1], 0.1)
    assert table.read(np.array([RATE_CLOCK_KEY], np.uint64))[1].tolist() == [False]  # nothing counted
