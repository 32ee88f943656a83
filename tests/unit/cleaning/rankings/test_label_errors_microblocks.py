"""Label-error ranking, micro-block screening edge cases (Gröger et al. 2023 §3.2).

Class sizes around the micro-block (``_TILE // 8``) and tile edges, singleton and two-member
classes, exact duplicates that tie across micro-blocks, record compaction, and the serial and
threaded paths, each compared with a chunked float64 brute force on the full distance matrix.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.spatial.distance import cdist

from noisycal_platform.cleaning.rankings import _kernels, label_error_scores, label_errors

from ._brute import clustered, unit32


def reference(x: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Brute-force (score, d_same, d_diff) from row chunks of the full float64 distance matrix."""
    x64 = unit32(x).astype(np.float64)
    n = x64.shape[0]
    singleton = np.unique(labels, return_counts=True)[1][np.unique(labels, return_inverse=True)[1]] == 1
    d_same, d_diff = np.empty(n), np.empty(n)
    for a in range(0, n, 512):
        b = min(n, a + 512)
        d = np.minimum(cdist(x64[a:b], x64, "sqeuclidean") / 4.0, 1.0)
        same = labels[a:b, None] == labels[None, :]
        not_self = np.arange(a, b)[:, None] != np.arange(n)[None, :]
        nearest_same = np.where(same & not_self, d, np.inf).min(axis=1)
        farthest_other = np.where(~same, d, -np.inf).max(axis=1)
        d_same[a:b] = np.where(singleton[a:b], farthest_other, nearest_same)
        d_diff[a:b] = np.where(~same, d, np.inf).min(axis=1)
    den = d_same**2 + d_diff**2
    score = np.where(den > 0, d_diff**2 / np.where(den > 0, den, 1.0), 0.5)
    return score, d_same, d_diff


def make(sizes: list[int], dim: int, seed: int, n_dup: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Clustered points with classes of the given sizes (shuffled) and ``n_dup`` copied rows."""
    rng = np.random.default_rng(seed)
    n = sum(sizes)
    x = clustered(n, dim=dim, n_clusters=6, seed=seed)
    labels = rng.permutation(np.repeat(np.arange(len(sizes)), sizes))
    if n_dup:  # exact copies: ties at d = 0 within and across labels and micro-blocks
        src, dst = rng.choice(n, (2, n_dup), replace=False)
        x[dst] = x[src]
    return x, labels


def assert_equal_reference(x: np.ndarray, labels: np.ndarray) -> None:
    score, d_same, d_diff = label_error_scores(x, labels)
    ref_score, ref_same, ref_diff = reference(x, labels)
    np.testing.assert_allclose(d_same, ref_same, rtol=0, atol=1e-14)
    np.testing.assert_allclose(d_diff, ref_diff, rtol=0, atol=1e-14)
    np.testing.assert_allclose(score, ref_score, rtol=0, atol=1e-12)


@pytest.mark.parametrize("workers", [1, 4])
@pytest.mark.parametrize(
    "sizes",
    [
        [1, 2],  # tiny N: a singleton and a pair
        [1, 2, 9, 10, 11, 79, 80, 81, 161],  # around micro-block (10) and tile (80) edges
        [3, 250],  # one big class next to a small one
    ],
)
def test_small_blocks_equal_brute_force(small_tiles, monkeypatch, sizes, workers):
    monkeypatch.setattr(_kernels, "MAX_WORKERS", workers)
    x, labels = make(sizes, dim=12, seed=sum(sizes), n_dup=sum(sizes) // 20)
    assert_equal_reference(x, labels)


def test_compaction_with_many_ties(small_tiles, monkeypatch):
    # tiny record cap: compaction runs after almost every fold; every point has several copies
    monkeypatch.setattr(label_errors, "_RECORDS_CAP", 8)
    rng = np.random.default_rng(5)
    base = clustered(60, dim=6, seed=5)
    x = base[rng.integers(0, 60, 400)]  # ~6-7 exact copies of each row, spread over micro-blocks
    labels = rng.integers(0, 3, 400)
    assert_equal_reference(x, labels)


def test_default_blocks_513_and_4097():
    # default sizes (micro-block 512, tile 4096): short last micro-blocks of 1 point, a tile + 1
    x, labels = make([1, 2, 513, 4097, 600], dim=8, seed=11, n_dup=40)
    assert_equal_reference(x, labels)
