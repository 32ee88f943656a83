"""Row-block rankings equal the single-process kernels exactly, pair for pair and value for value.

Exact by construction, so compared with ``assert_array_equal``: every row is normalised by itself and every
distance that reaches a result is the same float64 function (``_kernels.exact_dists``) of the same two float32
rows in a task and in ``rank_near_duplicates`` / ``label_error_scores``; float32 only decides which pairs are
re-evaluated, with a rigorous margin, so a min / max / top-k over those float64 values is the same number. The
inputs plant exact duplicates across blocks (ties at d = 0 that cut the top k), a tight cluster spanning
blocks, a one-member class and a class inside one block; n = 701 is not divisible by the block counts. Small
strips and tiles (patched) make the tasks run many strips, many column tiles and record compactions.
"""

import numpy as np
import pytest

from noisycal_platform.cleaning.rankings import _kernels, label_error_scores, rank_near_duplicates
from noisycal_platform.cleaning.rankings import row_blocks as rb
from noisycal_platform.cleaning.rankings.row_blocks import (
    blocked_label_error_scores,
    blocked_near_duplicates,
    blocked_rankings,
    row_blocks,
    task_pair_counts,
)


def _data(n=701, d=24, seed=3):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d))
    if n < 40:
        return x, rng.integers(0, 2, size=n)
    x[1] = x[n - 5]  # exact duplicates across blocks
    x[2] = 2.0 * x[3]  # same direction: distance 0 after normalisation
    x[n // 3 : n // 3 + 4] = x[n // 2]  # five equal rows: ten pairs tied at d = 0
    c = n - n // 7
    x[c : c + n // 35] = x[n // 7] + 1e-4 * rng.normal(size=(n // 35, d))  # a tight cluster spanning blocks
    labels = rng.integers(0, 5, size=n)
    labels[n // 5] = 9  # a class with one member
    labels[c : c + n // 70] = 7  # a class inside one part of the cluster
    return x, labels


def _assert_equal(got, want):
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)


@pytest.fixture
def small_strips(monkeypatch):
    monkeypatch.setattr(rb, "_STRIP", 16)
    monkeypatch.setattr(rb, "_TILE", 64)
    monkeypatch.setattr(_kernels, "RECORDS_CAP", 64)


def test_row_blocks_cover_the_rows_and_the_tasks_every_pair_once():
    assert row_blocks(10, 3) == [(0, 3), (3, 7), (7, 10)]
    assert row_blocks(2, 5) == [(0, 1), (1, 2)]
    for n, m in ((10, 3), (701, 4), (1000, 8)):
        counts = task_pair_counts(n, m)
        assert len(counts) == m * (m + 1) // 2
        assert sum(counts) == n * (n - 1) // 2  # no pair computed twice


@pytest.mark.parametrize("n_blocks", [1, 3, 4])
@pytest.mark.parametrize("top_k", [5, 300])
def test_both_rankings_in_one_pass_equal_the_single_process_kernels(small_strips, n_blocks, top_k):
    x, labels = _data()
    pairs, scores = blocked_rankings(x, top_k, labels, client=None, n_blocks=n_blocks)
    want = rank_near_duplicates(x, top_k)
    _assert_equal((pairs.pairs, pairs.scores), (want.pairs, want.scores))
    _assert_equal(scores, label_error_scores(x, labels))


def test_each_ranking_alone_with_the_default_strips():
    x, labels = _data()
    got = blocked_near_duplicates(x, 2000, n_blocks=3)
    want = rank_near_duplicates(x, 2000)
    _assert_equal((got.pairs, got.scores), (want.pairs, want.scores))
    _assert_equal(blocked_label_error_scores(x, labels, n_blocks=3), label_error_scores(x, labels))


def test_label_errors_with_one_class_or_a_block_of_one_class(small_strips):
    x, _ = _data(n=203)
    labels = np.r_[np.zeros(100, int), np.ones(103, int)]  # blocks (0, 51), (51, 102) hold class 0 only
    labels[150] = 0
    labels[180] = 4  # one member
    _assert_equal(blocked_label_error_scores(x, labels, n_blocks=4), label_error_scores(x, labels))
    got = blocked_label_error_scores(x, np.full(203, "a"), n_blocks=4)
    want = label_error_scores(x, np.full(203, "a"))  # (1, nan, inf): no other-label neighbour
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)
    x2 = _data(n=2)[0]  # two samples, two one-member classes: d_same = d_diff = the one distance
    _assert_equal(blocked_label_error_scores(x2, [0, 1], n_blocks=2), label_error_scores(x2, [0, 1]))


def test_top_k_beyond_all_pairs_and_bad_input(tmp_path):
    x, _ = _data(n=40)
    got, want = blocked_near_duplicates(x, 10**6, n_blocks=3), rank_near_duplicates(x, 10**6)
    assert got.pairs.shape == (40 * 39 // 2, 2)
    _assert_equal((got.pairs, got.scores), (want.pairs, want.scores))
    assert blocked_near_duplicates(x[:1], 5).pairs.shape == (0, 2)
    with pytest.raises(ValueError, match="top_k"):
        blocked_near_duplicates(x, 0)
    x[33, 2] = np.nan  # in the last of 3 blocks: the message names the row of the whole array
    with pytest.raises(ValueError, match="row 33"):
        blocked_near_duplicates(x, 5, n_blocks=3)
    with pytest.raises(ValueError, match="one entry per embedding row"):
        blocked_label_error_scores(x, [0, 1], n_blocks=3)


def test_on_a_two_worker_local_cluster_from_a_memory_mapped_file(tmp_path):
    distributed = pytest.importorskip("distributed")
    x, labels = _data(n=600)
    path = tmp_path / "emb.npy"
    np.save(path, x.astype(np.float32))
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster, distributed.Client(cluster) as client:
        pairs, scores = blocked_rankings(str(path), 1000, labels, client=client, n_blocks=3)
        from_memory = blocked_near_duplicates(x.astype(np.float32), 50, client=client, n_blocks=2)
    want = rank_near_duplicates(x.astype(np.float32), 1000)
    _assert_equal((pairs.pairs, pairs.scores), (want.pairs, want.scores))
    _assert_equal(scores, label_error_scores(x.astype(np.float32), labels))
    _assert_equal((from_memory.pairs, from_memory.scores), (want.pairs[:50], want.scores[:50]))
