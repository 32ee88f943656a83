"""Row-block rankings on Dask workers equal the single-process kernels exactly (pair for pair, score for score):
the same float64 distance of the same two normalised rows decides every comparison (module docstring)."""

import numpy as np
import pytest

from noisycal_platform.cleaning.rankings import label_error_scores, rank_near_duplicates
from noisycal_platform.cleaning.rankings.row_blocks import (
    blocked_label_error_scores,
    blocked_near_duplicates,
    row_blocks,
)

distributed = pytest.importorskip("distributed")


def _data(n=700, d=24, seed=3):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d))
    x[10] = x[n - 5]  # exact duplicates across blocks
    x[11] = 2.0 * x[12]  # same direction: distance 0 after normalisation
    x[n - 100 : n - 80] = x[100] + 1e-4 * rng.normal(size=(20, d))  # a tight cluster spanning blocks
    labels = rng.integers(0, 5, size=n)
    labels[123] = 9  # a class with one member
    labels[n - 100 : n - 90] = 7  # and a class inside one part of the cluster
    return x, labels


@pytest.fixture(scope="module")
def client():
    with distributed.Client(
        n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None
    ) as c:
        yield c


def test_row_blocks_cover_the_rows_once():
    blocks = row_blocks(10, 3)
    assert blocks == [(0, 3), (3, 7), (7, 10)]
    assert row_blocks(2, 5) == [(0, 1), (1, 2)]


@pytest.mark.parametrize("n_blocks", [2, 3, 5])
def test_near_duplicates_equal_the_single_process_ranking(client, n_blocks):
    x, _ = _data()
    want = rank_near_duplicates(x, 300)
    got = blocked_near_duplicates(x, 300, client=client, n_blocks=n_blocks)
    np.testing.assert_array_equal(got.pairs, want.pairs)
    np.testing.assert_array_equal(got.scores, want.scores)


def test_near_duplicates_from_a_memory_mapped_file(client, tmp_path):
    x, _ = _data(n=300)
    path = tmp_path / "emb.npy"
    np.save(path, x.astype(np.float32))
    want = rank_near_duplicates(x.astype(np.float32), 1000)
    got = blocked_near_duplicates(str(path), 1000, client=client, n_blocks=3)
    np.testing.assert_array_equal(got.pairs, want.pairs)
    np.testing.assert_array_equal(got.scores, want.scores)


@pytest.mark.parametrize("n_blocks", [2, 4])
def test_label_error_scores_equal_the_single_process_scores(client, n_blocks):
    x, labels = _data()
    want = label_error_scores(x, labels)
    got = blocked_label_error_scores(x, labels, client=client, n_blocks=n_blocks)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)


def test_label_errors_when_a_block_holds_one_class():
    x, _ = _data(n=200)
    labels = np.r_[np.zeros(100, int), np.ones(100, int)]  # with 2 blocks, task rows are ordered by class
    labels[150] = 0
    want = label_error_scores(x, labels)
    got = blocked_label_error_scores(x, labels, client=None, n_blocks=4)  # blocks (0,50),(50,100) are one class
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)
