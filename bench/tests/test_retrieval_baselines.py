"""The baselines of bench/retrieval.py, and implicit 0.7.3's item-kNN returning N + len(F) ids."""

from __future__ import annotations

import numpy as np
from implicit.nearest_neighbours import CosineRecommender  # the bench extra (make bench-test installs it)
from scipy.sparse import csr_matrix

from bench.retrieval_data import planted, time_split
from bench.retrieval_metrics import cut_excluding
from logrecords.generator import InteractionSpec


def test_item_knn_filter_items_list_is_cut_to_n():
    rng = np.random.default_rng(0)
    matrix = csr_matrix((rng.random((30, 20)) < 0.3).astype(np.float32))
    model = CosineRecommender(K=10)
    model.fit(matrix, show_progress=False)
    banned = [0, 1, 2]
    ids, _ = model.recommend(0, matrix[0], N=5, filter_items=banned, filter_already_liked_items=False)
    assert len(ids) >= 5  # 0.7.3 returns up to N + len(F): never score past N
    cut = cut_excluding(ids, banned, 5)
    assert len(cut) == 5 and not set(cut) & set(banned) and cut == [i for i in ids.tolist() if i not in banned][:5]


def test_baselines_give_k_unseen_items_to_every_holdout_user():
    from bench.retrieval_baselines import EVERY_RECORD, RECENT_NAME, TEMPORAL_MF_NAME, baseline_lists

    split = time_split(planted(InteractionSpec(events=6_000, users=200, items=150, seed=1)))
    lists = baseline_lists(split, k=10)
    names = {"popularity", RECENT_NAME, "item-kNN (cosine, K=50)", "ALS (implicit, 32 factors)",
             "BPR (implicit, 64 factors)", TEMPORAL_MF_NAME}
    assert set(lists) == names | {n + EVERY_RECORD for n in names}
    for per_user in lists.values():
        assert set(per_user) == set(split.truth)
        for user, items in per_user.items():
            assert len(items) == 10 and len(set(items)) == 10
            assert not set(items) & split.seen.get(user, set())
            assert set(items) <= set(split.catalogue.tolist())


def test_recent_popularity_ranks_by_decayed_positives():
    from bench.retrieval_baselines import recent_popularity
    from bench.retrieval_data import Interactions

    # item 1: 6 positives early; item 2: 3 positives late; item 3: 5 late negatives; user 9 held out
    item = np.array([1] * 6 + [2] * 3 + [3] * 5 + [2, 1])
    label = np.array([1] * 9 + [0] * 5 + [1, 1], np.int8)
    user = np.array([5] * 14 + [9, 9])
    log = Interactions("toy", user, item, label, np.arange(16), {}, {})
    split = time_split(log, 2 / 16)
    assert split.truth == {9: {1, 2}}
    assert recent_popularity(split, 2, half_life=0.1)[9] == [2, 1]  # recent positives outweigh old ones
    assert recent_popularity(split, 2, half_life=1e6)[9] == [1, 2]  # no decay: plain popularity
    assert recent_popularity(split, 3, half_life=0.1)[9] == [2, 1]  # never liked: never listed


def test_popularity_of_every_record_counts_the_label_0_records_too():
    from bench.retrieval_baselines import Matrix, popularity
    from bench.retrieval_data import Interactions

    # item 1: 3 positives; item 2: 4 records, 1 positive; user 9 held out
    item = np.array([1, 1, 1, 2, 2, 2, 2, 3])
    label = np.array([1, 1, 1, 1, 0, 0, 0, 1], np.int8)
    user = np.array([5, 6, 7, 5, 6, 7, 8, 9])
    split = time_split(Interactions("toy", user, item, label, np.arange(8), {}, {}), 1 / 8)
    assert split.truth == {9: {3}}
    assert popularity(split, 2)[9] == [1, 2]
    assert popularity(split, 2, every=True)[9] == [2, 1]
    assert Matrix(split).csr.nnz == 4 and Matrix(split, every=True).csr.nnz == 7
