"""Irrelevant-sample ranking: exact single linkage + dendrogram-area walk (Gröger et al. 2023 §3.2)."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from scipy.cluster.hierarchy import linkage
from scipy.spatial.distance import squareform

from noisycal_platform.cleaning.rankings import Ranking, lad_walk, rank_irrelevant, single_linkage
from noisycal_platform.cleaning.rankings._label_kernel import label_mst
from noisycal_platform.cleaning.rankings._mst import exact_mst
from noisycal_platform.cleaning.rankings.irrelevant import _label_mst

from ._brute import clustered, dense_dist, unit32


def reference_walk(z: np.ndarray, n: int) -> tuple[list[int], dict[int, float]]:
    """Walk written straight from the definition: explicit stack, smaller child first, running area."""
    count = {i: 1 for i in range(n)}
    height = {i: 0.0 for i in range(n)}
    children = {}
    for r, (a, b, h, c) in enumerate(z):
        children[n + r] = (int(a), int(b))
        height[n + r] = float(h)
        count[n + r] = int(c)
    stack = [(2 * n - 2, 1.0)]
    swept = 0.0
    order, scores = [], {}
    while stack:
        v, h_parent = stack.pop()
        swept += count[v] / n * (h_parent - height[v])
        if v < n:
            order.append(v)
            scores[v] = swept
            continue
        a, b = children[v]
        if count[a] > count[b] or (count[a] == count[b] and a > b):
            a, b = b, a
        stack.append((b, height[v]))
        stack.append((a, height[v]))
    return order, scores


def scipy_linkage(x: np.ndarray) -> np.ndarray:
    return linkage(squareform(dense_dist(x), checks=False), method="single")


def test_hand_built_four_point_tree():
    # A-B merge at 0.1, C joins at 0.3, D joins at 0.8 (ids: A=0, B=1, C=2, D=3)
    z = np.array([[0, 1, 0.1, 2], [2, 4, 0.3, 3], [3, 5, 0.8, 4]], dtype=float)
    order, scores = lad_walk(z, 4)
    # by hand: root 1*(1-0.8)=0.2; D 1/4*0.8=0.2; {ABC} 3/4*0.5=0.375; C 1/4*0.3=0.075;
    # {AB} 2/4*0.2=0.1; A 1/4*0.1=0.025; B 0.025
    assert order.tolist() == [3, 2, 0, 1]
    np.testing.assert_allclose(scores, [0.975, 1.0, 0.85, 0.4], rtol=0, atol=1e-15)


def test_four_points_from_embeddings_closed_form():
    # four unit vectors in the plane: A, B close, C further, D opposite-ish
    ang = np.deg2rad([0.0, 20.0, 70.0, 200.0])
    x = np.stack([np.cos(ang), np.sin(ang)], axis=1)
    d = dense_dist(x)
    h1, h2, h3 = d[0, 1], min(d[0, 2], d[1, 2]), min(d[0, 3], d[1, 3], d[2, 3])
    assert h1 < h2 < h3
    r = rank_irrelevant(x)
    assert r.order.tolist() == [3, 2, 0, 1]
    s_d = (1 - h3) + h3 / 4
    s_c = s_d + 3 / 4 * (h3 - h2) + h2 / 4
    s_a = s_c + 2 / 4 * (h2 - h1) + h1 / 4
    np.testing.assert_allclose(r.scores, [s_a, 1.0, s_c, s_d], rtol=0, atol=1e-12)


@pytest.mark.parametrize("n", [3, 17, 400, 3000])
def test_equals_brute_force_scipy(n):
    x = clustered(n, seed=n)
    zs = scipy_linkage(x)
    z = single_linkage(x)
    np.testing.assert_allclose(z[:, 2], zs[:, 2], rtol=0, atol=1e-12)
    np.testing.assert_array_equal(z[:, [0, 1, 3]], zs[:, [0, 1, 3]])
    r = rank_irrelevant(x)
    order, scores = reference_walk(zs, n)
    assert r.order.tolist() == order
    np.testing.assert_allclose(r.scores, [scores[i] for i in range(n)], rtol=0, atol=1e-12)
    np.testing.assert_allclose(r.scores[r.order[-1]], 1.0, atol=1e-12)  # the whole unit square


def test_multi_block_paths_equal_brute_force(small_tiles):
    x = clustered(700, dim=12, n_clusters=30, seed=5)
    zs = scipy_linkage(x)
    z = single_linkage(x)
    np.testing.assert_allclose(z[:, 2], zs[:, 2], rtol=0, atol=1e-12)
    np.testing.assert_array_equal(z[:, [0, 1, 3]], zs[:, [0, 1, 3]])


def test_single_linkage_does_not_need_faiss(monkeypatch, small_tiles):
    monkeypatch.setitem(sys.modules, "faiss", None)  # import faiss -> ImportError; our own GEMM tiles are used
    x = clustered(600, dim=12, n_clusters=25, seed=8)
    zs = scipy_linkage(x)
    z = single_linkage(x)
    np.testing.assert_allclose(z[:, 2], zs[:, 2], rtol=0, atol=1e-12)
    np.testing.assert_array_equal(z[:, [0, 1, 3]], zs[:, [0, 1, 3]])


def test_heights_match_fastcluster_peer():
    fastcluster = pytest.importorskip("fastcluster")
    x = unit32(clustered(1500, dim=32, seed=3)).astype(np.float64)
    zf = fastcluster.linkage_vector(x, method="single", metric="euclidean")
    z = single_linkage(x)
    # d = e^2 / 4 with e the Euclidean distance of the (float32) unit vectors
    np.testing.assert_allclose(z[:, 2], zf[:, 2] ** 2 / 4, rtol=1e-12, atol=1e-15)


def test_duplicates_and_ties_heights():
    rng = np.random.default_rng(2)
    base = rng.standard_normal((40, 8))
    # exact duplicates (merges at height 0), one point 12 times (more copies than list slots)
    x = np.concatenate([base, base[:15], base[:5], np.repeat(base[7:8], 11, axis=0)])
    zs = scipy_linkage(x)
    z = single_linkage(x)
    np.testing.assert_allclose(z[:, 2], zs[:, 2], rtol=0, atol=1e-12)
    assert (z[:, 2] == 0).sum() == 31
    r = rank_irrelevant(x)
    assert sorted(r.order.tolist()) == list(range(71))
    assert np.all(np.diff(r.scores[r.order]) >= 0)
    # deterministic
    r2 = rank_irrelevant(x)
    np.testing.assert_array_equal(r.order, r2.order)


def test_outlier_comes_first():
    x = clustered(300, dim=16, n_clusters=3, sigma=0.3, seed=1)
    x[0] = 0.0
    x[0, 0] = -1.0  # far from everything
    x[1:, 0] = np.abs(x[1:, 0]) + 2.0
    assert rank_irrelevant(x).order[0] == 0


def test_small_n():
    r1 = rank_irrelevant(np.ones((1, 3)))
    assert r1.order.tolist() == [0] and r1.scores.tolist() == [1.0]
    x = np.array([[1.0, 0.0], [0.0, 1.0]])  # d = 0.5
    r2 = rank_irrelevant(x)
    assert r2.order.tolist() == [0, 1]  # equal sizes: smaller id first
    np.testing.assert_allclose(r2.scores, [1 - 0.5 + 0.5 / 2, 1.0], atol=1e-15)


def test_deep_chain_walk_is_not_recursive():
    # leaf i joins a growing chain at height i/n: depth n-1, far beyond Python's recursion limit
    n = 200_000
    z = np.empty((n - 1, 4))
    z[0] = (0, 1, 1.0 / n, 2)
    z[1:, 0] = np.arange(2, n)
    z[1:, 1] = n + np.arange(0, n - 2)
    z[1:, 2] = np.arange(2, n) / n
    z[1:, 3] = np.arange(3, n + 1)
    z[1:, :2] = np.sort(z[1:, :2], axis=1)
    order, scores = lad_walk(z, n)
    assert order[: n - 2].tolist() == list(range(n - 1, 1, -1))  # latest joiner first
    assert order[-2:].tolist() == [0, 1]
    np.testing.assert_allclose(scores[order[-1]], 1.0, atol=1e-9)
    # closed form for the first leaf: (1 - h_root) + h_root / n
    h = (n - 1) / n
    np.testing.assert_allclose(scores[n - 1], (1 - h) + h / n, atol=1e-15)


def test_labelling_equals_scikit_learns():
    hierarchical = pytest.importorskip("sklearn.cluster._hierarchical_fast")  # a peer's union-find, tests only
    x = unit32(clustered(500, seed=9))
    i, j, d, _ = exact_mst(x)
    o = np.lexsort((j, i, d))
    z1 = _label_mst(i[o], j[o], d[o], 500)
    z2 = np.asarray(hierarchical.single_linkage_label(np.column_stack([i[o], j[o], d[o]]).astype(np.float64)))
    z2[:, :2] = np.sort(z2[:, :2], axis=1)
    np.testing.assert_array_equal(z1, z2)


def test_labelling_refuses_edges_that_are_not_a_spanning_tree():
    d = np.array([0.1, 0.2, 0.3])
    with pytest.raises(ValueError, match="expected 3 edges"):
        label_mst(np.array([0, 1]), np.array([1, 2]), d[:2], 4)
    with pytest.raises(ValueError, match=r"in \[0, 4\)"):
        label_mst(np.array([0, 1, 2]), np.array([1, 2, 4]), d, 4)
    with pytest.raises(ValueError, match="spanning tree"):
        label_mst(np.array([0, 1, 0]), np.array([1, 0, 2]), d, 4)  # the second edge closes a cycle
    assert label_mst(np.array([], np.int64), np.array([], np.int64), np.array([]), 1).shape == (0, 4)


def test_ranking_is_frozen():
    r = rank_irrelevant(clustered(20))
    assert isinstance(r, Ranking) and r.order.dtype == np.int64 and r.scores.dtype == np.float64
    with pytest.raises(ValueError):
        r.order[0] = 3


@pytest.mark.parametrize(
    "bad",
    [np.zeros(5), np.array([[1.0, np.nan]]), np.array([[0.0, 0.0], [1.0, 0.0]]), np.empty((0, 3))],
)
def test_invalid_input(bad):
    with pytest.raises(ValueError, match="emb"):
        rank_irrelevant(bad)


def test_lad_walk_rejects_bad_linkage():
    with pytest.raises(ValueError, match="linkage"):
        lad_walk(np.zeros((2, 4)), 4)
