"""Near-duplicate ranking: exact top-k pairs (Gröger et al. 2023 §3.2)."""

from __future__ import annotations

import numpy as np
import pytest

from noisycal_platform.cleaning.rankings import PairRanking, _kernels, rank_near_duplicates

from ._brute import clustered, dense_dist


def brute_top_k(x: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """argsort of the condensed distance matrix, ties by (i, j)."""
    d = dense_dist(x)
    i, j = np.triu_indices(d.shape[0], 1)
    dd = d[i, j]
    o = np.lexsort((j, i, dd))[:k]
    return np.stack([i[o], j[o]], axis=1), dd[o]


@pytest.mark.parametrize(("n", "k"), [(2, 1), (30, 435), (400, 1), (400, 777), (3000, 5000)])
def test_equals_brute_force(n, k):
    x = clustered(n, seed=n + k)
    r = rank_near_duplicates(x, k)
    pairs, dd = brute_top_k(x, k)
    np.testing.assert_array_equal(r.pairs, pairs)
    np.testing.assert_allclose(r.scores, dd, rtol=0, atol=1e-15)


def test_multi_tile_equals_brute_force(small_tiles):
    x = clustered(1000, dim=16, seed=4)
    for k in (1, 50, 3000):
        r = rank_near_duplicates(x, k)
        pairs, dd = brute_top_k(x, k)
        np.testing.assert_array_equal(r.pairs, pairs)
        np.testing.assert_allclose(r.scores, dd, rtol=0, atol=1e-15)


@pytest.mark.parametrize("workers", [1, 4])
@pytest.mark.parametrize(("n", "k"), [(97, 3), (300, 2000), (300, 20_000), (500, 44)])
def test_strips_threads_and_copies_equal_brute_force(small_tiles, monkeypatch, workers, n, k):
    # tiles of 96 points in strips of 12 rows; k = 20,000 exceeds every tile's pairs (no tile
    # threshold until the merged buffer is full); exact copies tie at d = 0 across tiles
    monkeypatch.setattr(_kernels, "MAX_WORKERS", workers)
    rng = np.random.default_rng(n + k)
    x = clustered(n, dim=10, seed=n)
    src, dst = rng.choice(n, (2, n // 4), replace=False)
    x[dst] = x[src]
    r = rank_near_duplicates(x, k)
    pairs, dd = brute_top_k(x, k)
    np.testing.assert_array_equal(r.pairs, pairs)
    np.testing.assert_allclose(r.scores, dd, rtol=0, atol=1e-15)


def test_planted_near_duplicates_come_first():
    rng = np.random.default_rng(0)
    x = clustered(600, dim=32, seed=1)
    src = rng.choice(600, 20, replace=False)
    copies = x[src] + 1e-3 * rng.standard_normal((20, 32))
    x = np.concatenate([x, copies])
    r = rank_near_duplicates(x, 20)
    expected = {(int(s), 600 + t) for t, s in enumerate(src)}
    assert {tuple(p) for p in r.pairs.tolist()} == expected


def test_exact_duplicate_ties_ordered_by_index():
    v = np.array([[1.0, 2.0, 3.0]])
    x = np.concatenate([v, [[3.0, -1.0, 0.5]], v, v, 2 * v])  # rows 0, 2, 3, 4 are the same direction
    r = rank_near_duplicates(x, 6)
    assert r.pairs.tolist() == [[0, 2], [0, 3], [0, 4], [2, 3], [2, 4], [3, 4]]
    np.testing.assert_allclose(r.scores, 0.0, atol=1e-7)


def test_top_k_clamped_to_all_pairs():
    x = clustered(5, seed=2)
    r = rank_near_duplicates(x, 10_000)
    assert len(r) == 10 and isinstance(r, PairRanking)
    assert np.all(r.pairs[:, 0] < r.pairs[:, 1])
    assert np.all(np.diff(r.scores) >= 0)
    assert len(rank_near_duplicates(np.ones((1, 4)), 3)) == 0


@pytest.mark.parametrize("k", [0, -1, 2.5, True, "3"])
def test_invalid_top_k(k):
    with pytest.raises(ValueError, match="top_k"):
        rank_near_duplicates(clustered(10), k)


def test_invalid_emb():
    with pytest.raises(ValueError, match="emb"):
        rank_near_duplicates(np.array([[np.inf, 1.0], [1.0, 0.0]]), 1)


@pytest.mark.slow
def test_larger_multi_tile_brute_force():
    x = clustered(6000, dim=48, n_clusters=40, seed=11)
    k = 20_000
    r = rank_near_duplicates(x, k)
    pairs, dd = brute_top_k(x, k)
    np.testing.assert_array_equal(r.pairs, pairs)
    np.testing.assert_allclose(r.scores, dd, rtol=0, atol=1e-15)
