"""Exact MST kernels (Gröger et al. 2023 §3.2): k-NN first lists, exact rescans, the tree itself.

References are brute force on the dense float64 distance matrix: Kruskal over all pairs sorted by
the strict key (d, i, j), and per-point sorted distance rows.
"""

from __future__ import annotations

import numpy as np
import pytest

from noisycal_platform.cleaning.rankings import _kernels, _mst
from noisycal_platform.cleaning.rankings._kernels import screen_margin

from ._brute import clustered, dense_dist, unit32


def kruskal(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The unique MST under the key (d, i, j): Kruskal over all pairs, union-find in Python."""
    d = dense_dist(x)
    i, j = np.triu_indices(d.shape[0], 1)
    o = np.lexsort((j, i, d[i, j]))
    parent = list(range(d.shape[0]))

    def find(v: int) -> int:
        while parent[v] != v:
            parent[v] = parent[parent[v]]
            v = parent[v]
        return v

    keep = []
    for e in o.tolist():
        ri, rj = find(int(i[e])), find(int(j[e]))
        if ri != rj:
            parent[ri] = rj
            keep.append(e)
    keep = np.array(keep, dtype=np.int64)
    return i[keep], j[keep], d[i[keep], j[keep]]


def sorted_edges(i: np.ndarray, j: np.ndarray, d: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    o = np.lexsort((j, i, d))
    return i[o], j[o], d[o]


def with_copies(n: int, dim: int, seed: int) -> np.ndarray:
    """Clustered points where a third of the rows are exact copies (ties at d = 0 across tiles)."""
    rng = np.random.default_rng(seed)
    x = clustered(n, dim=dim, n_clusters=8, seed=seed)
    src, dst = rng.choice(n, (2, n // 3), replace=False)
    x[dst] = x[src]
    return x


@pytest.mark.parametrize("workers", [1, 4])
@pytest.mark.parametrize(("n", "dim", "copies"), [(5, 3, False), (300, 10, True), (650, 6, False), (900, 24, False)])
def test_mst_equals_kruskal(small_tiles, monkeypatch, workers, n, dim, copies):
    monkeypatch.setattr(_kernels, "MAX_WORKERS", workers)
    monkeypatch.setattr(_mst, "_PARALLEL_MIN", 0)  # threaded rescans even for small inputs
    x = with_copies(n, dim, seed=n) if copies else clustered(n, dim=dim, seed=n)
    i, j, d, stats = _mst.exact_mst(unit32(x))
    ri, rj, rd = kruskal(x)
    ei, ej, ed = sorted_edges(i, j, d)
    np.testing.assert_array_equal(ei, ri)
    np.testing.assert_array_equal(ej, rj)
    np.testing.assert_allclose(ed, rd, rtol=0, atol=1e-15)
    assert stats["rounds"] >= 1 and np.all(i < j)


@pytest.mark.parametrize("n", [2, 9, 10, 97, 400])
def test_first_lists_are_certified_neighbours(small_tiles, n):
    # the k listed points are the k nearest (by exact d, up to float32 screening near-ties) and
    # every other point is at distance >= lb
    x0 = with_copies(n, 8, seed=n)
    x = unit32(x0)
    k = min(8, n - 1)
    nbr = np.empty((n, k), np.int64)
    nd = np.empty((n, k))
    lb = np.empty(n)
    exact0 = np.zeros(n, bool)
    _mst._first_lists(k, screen_margin(x), (nbr, nd, lb, exact0), _mst._Blocks(x))
    d = dense_dist(x0)
    np.fill_diagonal(d, np.inf)
    rows = np.arange(n)[:, None]
    np.testing.assert_allclose(nd[~exact0], d[rows, nbr][~exact0], rtol=0, atol=1e-15)
    assert np.all(nbr != rows)
    assert np.all(np.diff(nd[~exact0], axis=1) >= 0)
    listed = np.zeros((n, n), bool)
    listed[rows, nbr] = True
    listed[rows, rows] = True
    assert np.all(np.where(listed, np.inf, d).min(axis=1) >= lb - 1e-15)
    # the first entry is the exact nearest whenever it is certified (d < lb) or exact0
    first_ok = (nd[:, 0] < lb) | exact0
    assert first_ok.all()
    np.testing.assert_allclose(nd[:, 0], d.min(axis=1), rtol=0, atol=1e-15)


def test_rescan_exact_nearest_outside_component(small_tiles, monkeypatch):
    monkeypatch.setattr(_mst, "_PARALLEL_MIN", 0)
    n = 500
    x0 = with_copies(n, 6, seed=3)
    x = unit32(x0)
    rng = np.random.default_rng(3)
    # components: 70 singletons and a few large ones, so strips hold one or many components
    comp = np.concatenate([np.arange(70), rng.integers(70, 75, n - 70)])[rng.permutation(n)]
    rows = rng.choice(n, 260, replace=False)
    k = 4
    lists = (np.zeros((n, k), np.int64), np.zeros((n, k)), np.zeros(n), np.zeros(n, bool))
    blocks = _mst._Blocks(x)
    _mst._rescan_exact(rows, comp, screen_margin(x), lists, blocks)
    np.testing.assert_array_equal(blocks.xs, x[blocks.perm])  # the rows back in block order
    nbr, nd, lb, exact0 = lists
    d = dense_dist(x0)
    d[comp[:, None] == comp[None, :]] = np.inf
    want = np.lexsort((np.arange(n)[None, :].repeat(rows.size, 0), d[rows]), axis=1)[:, 0]  # (d, j) first
    np.testing.assert_array_equal(nbr[rows, 0], want)
    np.testing.assert_allclose(nd[rows, 0], d[rows].min(axis=1), rtol=0, atol=1e-15)
    np.testing.assert_array_equal(lb[rows], nd[rows, 0])
    assert exact0[rows].all() and np.all(nbr[rows, 1:] == rows[:, None])


def test_group_bound_is_a_lower_bound():
    rng = np.random.default_rng(0)
    for w in (3, 17, 40, 257):
        s = rng.standard_normal((30, w)).astype(np.float32)
        s[rng.random(s.shape) < 0.2] = -np.inf
        s[:2] = -np.inf
        s[2] = rng.standard_normal(w)  # one fully finite row
        for kk in (1, 5, 9):
            bound = _mst._group_bound(s, kk)
            kth = -np.sort(-s, axis=1)[:, kk - 1] if w >= kk else np.full(30, -np.inf)
            assert np.all(bound <= kth)
            assert np.isneginf(bound[:2]).all()
            assert np.isfinite(bound[2]) == (w >= kk)  # >= kk groups whenever the row has kk entries


def test_merge_top_keeps_the_k_plus_1_largest_under_s_then_partner_in_any_order():
    from noisycal_platform.cleaning.rankings._mst_kernels import merge_top

    rng = np.random.default_rng(1)
    n, k1 = 40, 9
    pairs = np.array([(p, q) for p in range(n) for q in range(n) if p != q])
    s = rng.choice(np.linspace(-1, 1, 7), len(pairs)).astype(np.float32)  # many exact ties: the partner decides
    want_v = np.full((n, k1), -np.inf, np.float32)
    want_j = np.full((n, k1), -1, np.int64)
    for p in range(n):
        mine = pairs[:, 0] == p
        o = np.lexsort((pairs[mine, 1], -s[mine]))[:k1]
        want_v[p], want_j[p] = s[mine][o], pairs[mine, 1][o]
    for seed in range(3):  # entries in any order and in batches give the same lists
        o = np.random.default_rng(seed).permutation(len(pairs))
        topv, topj = np.full((n, k1), -np.inf, np.float32), np.full((n, k1), -1, np.int64)
        thr = np.full(n, -np.inf, np.float32)
        for part in np.array_split(o, 5):
            merge_top(pairs[part, 0], pairs[part, 1], s[part], topv, topj, thr)
        np.testing.assert_array_equal(topv, want_v)
        np.testing.assert_array_equal(topj, want_j)
        np.testing.assert_array_equal(thr, want_v[:, -1])


def test_best_per_component_is_the_least_d_lo_hi_edge_of_each_component():
    rng = np.random.default_rng(4)
    n, n_comp = 300, 17
    comp = rng.integers(0, n_comp, n)
    comp[comp == 5] = 6  # a component with no point
    cand_j = rng.integers(0, n, n)
    cand_d = rng.choice([0.0, 0.25, 0.5], n)  # ties on d, and on lo between edges of one component
    ci = np.sort(rng.choice(n, 200, replace=False))
    sel, lo, hi = _mst._best_per_component(ci, cand_j, cand_d, comp, n_comp)
    np.testing.assert_array_equal(lo, np.minimum(ci, cand_j[ci]))
    np.testing.assert_array_equal(hi, np.maximum(ci, cand_j[ci]))
    want = []
    for c in np.unique(comp[ci]):
        mine = np.flatnonzero(comp[ci] == c)
        want.append(mine[np.lexsort((hi[mine], lo[mine], cand_d[ci][mine]))[0]])
    np.testing.assert_array_equal(sel, want)


@pytest.mark.parametrize("kind", ["copies", "near_ties"])
def test_in_place_gives_the_same_mst_and_puts_the_rows_back(small_tiles, kind):
    rng = np.random.default_rng(5)
    x0 = with_copies(600, 7, seed=5) if kind == "copies" else np.repeat(rng.standard_normal((40, 7)), 15, axis=0)
    x = unit32(x0 + (0 if kind == "copies" else 1e-5 * rng.standard_normal(x0.shape)))
    want = _mst.exact_mst(x.copy())
    y = x.copy()
    got = _mst.exact_mst(y, in_place=True)
    for a, b in zip(got[:3], want[:3], strict=True):
        np.testing.assert_array_equal(a, b)  # the same rows, so the same arithmetic
    np.testing.assert_array_equal(y, x)  # bit for bit back in the caller's order


def test_in_place_puts_the_rows_back_on_an_error(small_tiles, monkeypatch):
    x = unit32(with_copies(300, 5, seed=2))
    y = x.copy()

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(_mst, "_first_lists", broken)
    with pytest.raises(RuntimeError, match="boom"):
        _mst.exact_mst(y, in_place=True)
    np.testing.assert_array_equal(y, x)
    with pytest.raises(ValueError, match="writable C-contiguous float32"):
        _mst.exact_mst(x.astype(np.float64), in_place=True)


def test_permute_rows_is_a_gather_in_place():
    from noisycal_platform.cleaning.rankings._mst_kernels import permute_rows

    rng = np.random.default_rng(0)
    x = rng.standard_normal((1000, 6)).astype(np.float32)
    for perm in (rng.permutation(1000), np.arange(1000), np.r_[1:1000, 0]):  # random, identity, one long cycle
        y = x.copy()
        permute_rows(y, perm)
        np.testing.assert_array_equal(y, x[perm])


def test_results_independent_of_workers(small_tiles, monkeypatch):
    x = unit32(with_copies(700, 5, seed=8))
    out = []
    for workers in (1, 2, 4):
        monkeypatch.setattr(_kernels, "MAX_WORKERS", workers)
        out.append(sorted_edges(*_mst.exact_mst(x)[:3]))
    for o in out[1:]:
        for a, b in zip(out[0], o, strict=True):
            np.testing.assert_array_equal(a, b)
