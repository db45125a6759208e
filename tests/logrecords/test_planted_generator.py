"""The planted generator: known Bayes AUC in the realistic range, Zipf ids, drift, Criteo/JSON encodings."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from logrecords.criteo import CriteoParser
from logrecords.generator import ITEM_SLOT, USER_SLOT, PlantedModel, roc_auc
from logrecords.json_lines import JsonLinesParser
from logrecords.sample_encoding import (
    criteo_lines,
    generated_criteo_schema,
    generated_json_schema,
    json_lines,
    write_dataset,
)
from streaming.file_dataset import FileDataset


@pytest.mark.slow
def test_bayes_auc_is_in_the_realistic_range_for_default_seeds() -> None:
    for seed in (0, 1, 2):
        s = PlantedModel(seed=seed).sample(200_000)
        auc = roc_auc(s.labels, s.prob)
        assert 0.76 <= auc <= 0.80, (seed, auc)
        assert 0.1 < s.labels.mean() < 0.4
        # Labels follow the true probabilities (calibration by decile).
        bins = np.digitize(s.prob, np.quantile(s.prob, np.linspace(0, 1, 11)[1:-1]))
        for b in range(10):
            m = bins == b
            assert abs(s.labels[m].mean() - s.prob[m].mean()) < 0.02


@pytest.mark.slow
def test_same_seed_same_data_and_ids_are_zipf_skewed() -> None:
    a, b = PlantedModel(seed=4).sample(50_000), PlantedModel(seed=4).sample(50_000)
    assert np.array_equal(a.sparse, b.sparse) and np.array_equal(a.labels, b.labels)
    _, counts = np.unique(a.user_id, return_counts=True)
    top = np.sort(counts)[::-1]
    assert top[0] > 20 * np.median(top)  # a few popular users, a long tail


def test_drift_rotates_the_hidden_weights() -> None:
    ranks = np.arange(1000)
    steady = PlantedModel(seed=1)
    drifting = PlantedModel(seed=1, drift=1.0)
    assert np.array_equal(steady.weights(3, ranks, at_event=0), steady.weights(3, ranks, at_event=5e6))
    early, late = drifting.weights(3, ranks, at_event=0), drifting.weights(3, ranks, at_event=1.5e6)
    assert np.array_equal(early, steady.weights(3, ranks, at_event=0))
    assert abs(np.corrcoef(early, late)[0, 1]) < 0.2


def test_criteo_and_json_encodings_parse_back_to_the_same_features() -> None:
    s = PlantedModel(seed=2).sample(2000)
    c, rej_c = CriteoParser(generated_criteo_schema()).parse(criteo_lines(s))
    j, rej_j = JsonLinesParser(generated_json_schema()).parse(json_lines(s))
    assert rej_c == [] and rej_j == []
    assert np.array_equal(c.labels, s.labels.astype(np.float32))
    assert np.array_equal(c.dense, np.where(s.dense_missing, 0, s.dense).astype(np.float32))
    assert np.array_equal(c.user_id, s.user_id.astype(np.uint64))  # slot 0: the raw id itself
    assert np.array_equal(c.item_id, (np.uint64(ITEM_SLOT) << np.uint64(56)) | s.item_id.astype(np.uint64))
    assert np.array_equal(c.dense, j.dense) and np.array_equal(c.user_id, j.user_id)
    for k in range(3, 27):
        vc, oc = c.slots[f"C{k}"]
        vj, oj = j.slots[f"C{k}"]
        assert np.array_equal(vc, vj) and np.array_equal(oc, oj)
        assert np.array_equal(np.diff(oc) == 0, s.sparse_missing[:, k - 1])
    assert np.allclose(j.event_time, s.event_time)
    assert USER_SLOT == 0


@pytest.mark.slow
def test_written_file_reports_the_bayes_auc_of_its_rows(tmp_path: Path) -> None:
    path = tmp_path / "train.tsv"
    stats = write_dataset(path, PlantedModel(seed=9), 30_000, chunk_rows=7_000)
    replay = PlantedModel(seed=9)
    probs = np.concatenate([replay.sample(n).prob for n in (7_000, 7_000, 7_000, 7_000, 2_000)])
    data = FileDataset([path], generated_criteo_schema(), batch_size=5000).load()
    assert stats["rows"] == len(data) == 30_000
    assert stats["bayes_auc"] == roc_auc(data.labels, probs)
    assert stats["ctr"] == float(data.labels.astype(np.float64).mean())


def test_roc_auc_counts_ties_as_half() -> None:
    assert roc_auc(np.array([0, 1]), np.array([0.5, 0.5])) == 0.5
    assert roc_auc(np.array([0, 0, 1, 1]), np.array([0.1, 0.4, 0.35, 0.8])) == 0.75
