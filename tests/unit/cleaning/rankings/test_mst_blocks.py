"""Block maxima of the exact MST (``_mst._Blocks``): the bound itself, the pruned rescans, the pruned first pass.

References are brute force in the arithmetic the MST decides with: ``exact_dists`` (float64 from the float32
rows) on every pair, the nearest outside point taken under (d, j); the float64 inner products of the float32
rows for the block maxima. The data are built to break a wrong bound: float32 near-ties (distances that differ
only below float32 resolution, spread over several blocks), exact copies, clusters of equal points, one giant
component.
"""

from __future__ import annotations

import numpy as np
import pytest

from noisycal_platform.cleaning.rankings import _kernels, _mst
from noisycal_platform.cleaning.rankings._kernels import exact_dists, screen_margin, sim_error_bound

from ._brute import clustered, unit32
from .test_mst import kruskal, sorted_edges, with_copies


def near_ties(n: int, dim: int, seed: int) -> np.ndarray:
    """Groups of 16 points within ~1e-4 of a common direction: their float32 similarities are all 1.0 up to
    an ulp or two, while the exact float64 distances (~1e-9) differ; the groups span several blocks."""
    rng = np.random.default_rng(seed)
    base = rng.standard_normal((-(-n // 16), dim))
    x = np.repeat(base, 16, axis=0)[:n]
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x + 1e-4 * rng.standard_normal(x.shape) / np.sqrt(dim)


def equal_clusters(n: int, dim: int, seed: int) -> np.ndarray:
    """A few distinct vectors, each repeated many times (d = 0 ties everywhere), plus distinct points."""
    rng = np.random.default_rng(seed)
    x = clustered(n, dim=dim, n_clusters=5, seed=seed)
    src = rng.integers(0, 6, n // 2)
    x[rng.choice(n, n // 2, replace=False)] = x[src]
    return x


DATA = {
    "near_ties": near_ties,
    "copies": lambda n, dim, seed: with_copies(n, dim, seed),
    "equal": equal_clusters,
}


def first_pass(x: np.ndarray, k: int = 8) -> tuple[tuple, _mst._Blocks, float]:
    n = x.shape[0]
    k = min(k, n - 1)
    lists = (np.empty((n, k), np.int64), np.empty((n, k)), np.empty(n), np.zeros(n, bool))
    blocks = _mst._Blocks(x)
    eps2 = screen_margin(x)
    _mst._first_lists(k, eps2, lists, blocks)
    return lists, blocks, eps2


def nearest_outside(x: np.ndarray, rows: np.ndarray, comp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Brute force: per row the smallest (d, j) over the points of other components, d by ``exact_dists``."""
    n = x.shape[0]
    d = exact_dists(x, np.repeat(rows, n), np.tile(np.arange(n), rows.size)).reshape(rows.size, n)
    d[comp[rows][:, None] == comp[None, :]] = np.inf
    j = np.lexsort((np.broadcast_to(np.arange(n), d.shape), d), axis=1)[:, 0]
    return j, d[np.arange(rows.size), j]


@pytest.mark.parametrize("bs", [4, 8, 64])
@pytest.mark.parametrize("kind", sorted(DATA))
def test_block_maxima_are_the_block_maxima(small_tiles, monkeypatch, bs, kind):
    monkeypatch.setattr(_mst, "_BLOCK", bs)
    x = unit32(DATA[kind](400, 12, 5))
    n = x.shape[0]
    _, blocks, _ = first_pass(x)
    assert np.array_equal(np.sort(blocks.perm), np.arange(n)) and np.array_equal(blocks.pos[blocks.perm], np.arange(n))
    x64 = blocks.xs.astype(np.float64)
    s = x64 @ x64.T
    np.fill_diagonal(s, -np.inf)
    want = np.maximum.reduceat(s, np.arange(0, n, blocks.size), axis=1)
    eps = sim_error_bound(x.shape[1])
    fin = np.isfinite(want)
    assert np.array_equal(fin, np.isfinite(blocks.m))  # -inf only for a block holding just the point itself
    assert np.all(np.abs(blocks.m[fin] - want[fin]) <= eps)


@pytest.mark.parametrize("bs", [4, 8, 64])
@pytest.mark.parametrize("kind", sorted(DATA))
@pytest.mark.parametrize("comps", ["few", "giant", "singletons"])
@pytest.mark.parametrize("dense", [np.inf, 0.0])  # never / always handed to _rescan_exact
def test_rescan_blocks_is_the_nearest_outside_point(small_tiles, monkeypatch, bs, kind, comps, dense):
    monkeypatch.setattr(_mst, "_BLOCK", bs)
    monkeypatch.setattr(_mst, "_RESCAN_DENSE", dense)
    monkeypatch.setattr(_mst, "_TASK_MACS", 0 if dense else 1 << 62)
    rng = np.random.default_rng(bs)
    x = unit32(DATA[kind](360, 10, bs))
    n = x.shape[0]
    lists, blocks, eps2 = first_pass(x)
    if comps == "few":  # splits every near-tie group and copy set between components
        comp = rng.integers(0, 6, n)
    elif comps == "giant":  # 90% in one component, the rest singletons
        comp = np.where(rng.random(n) < 0.9, 0, 1 + np.arange(n))
    else:
        comp = np.arange(n)
    rows = np.sort(rng.choice(n, 200, replace=False))
    _mst._rescan_blocks(rows, comp, eps2, lists, blocks)
    nbr, nd, lb, exact0 = lists
    want_j, want_d = nearest_outside(x, rows, comp)
    np.testing.assert_array_equal(nbr[rows, 0], want_j)
    np.testing.assert_array_equal(nd[rows, 0], want_d)
    np.testing.assert_array_equal(lb[rows], want_d)
    assert exact0[rows].all() and np.all(nbr[rows, 1:] == rows[:, None])


@pytest.mark.parametrize("bs", [4, 8])
@pytest.mark.parametrize("workers", [1, 4])
@pytest.mark.parametrize("kind", sorted(DATA))
def test_mst_with_small_blocks_equals_kruskal(small_tiles, monkeypatch, bs, workers, kind):
    monkeypatch.setattr(_mst, "_BLOCK", bs)
    monkeypatch.setattr(_mst, "_RESCAN_DENSE", np.inf)  # the block path even where it prunes little
    monkeypatch.setattr(_mst, "_TASK_MACS", 0)  # and for few rows
    monkeypatch.setattr(_kernels, "MAX_WORKERS", workers)
    x0 = DATA[kind](420, 8, 11)
    i, j, d, _ = _mst.exact_mst(unit32(x0))
    ri, rj, rd = kruskal(x0)
    ei, ej, ed = sorted_edges(i, j, d)
    np.testing.assert_array_equal(ei, ri)
    np.testing.assert_array_equal(ej, rj)
    np.testing.assert_allclose(ed, rd, rtol=0, atol=1e-15)


@pytest.mark.parametrize("bs", [4, 8, 64, 256])
@pytest.mark.parametrize("cols", [True, False])
@pytest.mark.parametrize("at", [(0, 0), (3, 70), (128, 512)])  # strip's first row and column in the point order
@pytest.mark.parametrize("shape", [(26, 45), (130, 300)])  # chunks past the last full one in both directions
def test_strip_pass_gives_every_entry_once_and_the_block_maxima(bs, cols, at, shape):
    rng = np.random.default_rng(bs)
    (h, w), (r0, c0) = shape, at
    blocks = _mst._Blocks.__new__(_mst._Blocks)
    blocks.size = bs
    s = rng.choice(np.linspace(-1, 1, 9), (h, w)).astype(np.float32)  # many exact ties with the thresholds
    s[rng.random(s.shape) < 0.1] = -np.inf
    tr = rng.choice(np.linspace(-1, 1, 9), h).astype(np.float32)
    tc = rng.choice(np.linspace(-1, 1, 9), w).astype(np.float32) if cols else None
    full = s >= tr[:, None]
    if cols:
        full |= s >= tc[None, :]
    (i, j, v), folds = blocks.strip(r0, c0, s, tr, tc)
    got = np.zeros_like(full)
    got[i, j] = True
    assert np.array_equal(got, full) and i.size == full.sum()  # every entry once
    np.testing.assert_array_equal(v, s[i, j])
    # block maxima: block of column c0 + j is (c0 + j) // bs
    row_blocks = (c0 + np.arange(w)) // bs
    want_rm = np.stack([s[:, row_blocks == q].max(axis=1) for q in np.unique(row_blocks)], axis=1)
    assert folds[0][:2] == (r0, c0 // bs)
    np.testing.assert_array_equal(folds[0][2], want_rm)
    assert len(folds) == 1 + cols
    if cols:
        col_blocks = (r0 + np.arange(h)) // bs
        want_cm = np.stack([s[col_blocks == q].max(axis=0) for q in np.unique(col_blocks)], axis=1)
        assert folds[1][:2] == (c0, r0 // bs)
        np.testing.assert_array_equal(folds[1][2], want_cm)


def test_strip_pass_with_more_entries_than_its_first_room():
    rng = np.random.default_rng(3)
    blocks = _mst._Blocks.__new__(_mst._Blocks)
    blocks.size = 64
    s = rng.standard_normal((64, 512)).astype(np.float32)
    tr = np.full(64, -10.0, np.float32)  # every entry: 32,768 > the first room of 32 per row
    (i, j, v), _ = blocks.strip(0, 0, s, tr, None)
    assert i.size == s.size
    np.testing.assert_array_equal(np.sort(i * 512 + j), np.arange(s.size))
    np.testing.assert_array_equal(v, s[i, j])
