"""Cell-pruned rankings (``_cells``, ``_pruned``): the same results as a float64 brute force, the bound never drops
a partner, and the dense kernels take over where the cells cannot prune."""

from __future__ import annotations

import numpy as np
import pytest

from noisycal_platform.cleaning.rankings import (
    _cells,
    _kernels,
    _pruned,
    label_error_scores,
    rank_label_errors,
    rank_near_duplicates,
)
from noisycal_platform.cleaning.rankings._kernels import as_unit_embeddings

from ._brute import clustered, dense_dist
from .test_label_errors import brute_scores
from .test_near_duplicates import brute_top_k


def _clusters_with_copies(n: int, seed: int, dim: int = 32) -> np.ndarray:
    """Tight clusters (many cells), 3% uniform background (outliers), planted near and exact copies (ties)."""
    rng = np.random.default_rng(seed)
    x = clustered(n, dim=dim, n_clusters=max(2, n // 60), sigma=0.4, seed=seed)
    src, dst = rng.choice(n, (2, n // 20), replace=False)
    x[dst] = x[src] + 1e-3 * rng.standard_normal((dst.size, dim))
    x[dst[:5]] = x[src[:5]]  # exact copies: ties at d = 0
    return x


def _brute_distances(x: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    d = dense_dist(x)
    same = labels[:, None] == labels[None, :]
    np.fill_diagonal(d, np.inf)
    d_same = np.where(same, d, np.inf).min(axis=1)
    d_diff = np.where(~same, d, np.inf).min(axis=1)
    single = same.sum(axis=1) == 1
    d_same[single] = np.where(~same, dense_dist(x), -np.inf).max(axis=1)[single]
    return d_same, d_diff


@pytest.mark.parametrize(("n", "k", "seed"), [(1500, 1, 0), (2500, 700, 1), (2500, 20_000, 2)])
def test_pruned_pairs_equal_brute_force(n, k, seed):
    x = _clusters_with_copies(n, seed)
    r = _pruned.pruned_top_pairs(as_unit_embeddings(x), k)
    assert r is not None, "the cells should prune clustered data"
    pairs, dd = brute_top_k(x, k)
    np.testing.assert_array_equal(r.pairs, pairs)
    np.testing.assert_allclose(r.scores, dd, rtol=0, atol=1e-15)


@pytest.mark.parametrize(("n", "n_cls", "seed"), [(1500, 2, 3), (2500, 5, 4)])
def test_pruned_label_distances_equal_brute_force(monkeypatch, n, n_cls, seed):
    # at this size the outliers and neighbourhoods are a larger share of the work than the defaults allow: raised,
    # so that the pruned path runs (its decline is tested below)
    monkeypatch.setattr(_pruned, "PRUNE_EARLY_WORK", 2.0)
    monkeypatch.setattr(_pruned, "PRUNE_MAX_WORK", 2.0)
    rng = np.random.default_rng(seed)
    x = _clusters_with_copies(n, seed)
    labels = rng.integers(0, n_cls, n)
    labels[:3] = [97, 98, 99]  # three one-member classes (the farthest other-label convention)
    codes = np.unique(labels, return_inverse=True)[1].astype(np.int64)
    got = _pruned.pruned_label_distances(as_unit_embeddings(x), codes)
    assert got is not None, "the cells should prune clustered data"
    want = _brute_distances(x, labels)
    np.testing.assert_allclose(got[0], want[0], rtol=0, atol=1e-15)
    np.testing.assert_allclose(got[1], want[1], rtol=0, atol=1e-15)


@pytest.mark.parametrize("copy_bytes", [0, 1 << 30])  # the label-sorted copy of the rows, or gathers per block
def test_label_pure_clusters_scan_every_other_label_row(monkeypatch, copy_bytes):
    # labels by cluster (as the benchmark's cluster id mod 2) with 2% flipped: many rows find no other-label
    # partner in their cell or its neighbours and take the scan of every other-label row (more work than the
    # default share allows here, so the share is raised); the result stays exact
    monkeypatch.setattr(_pruned, "PRUNE_MAX_WORK", 2.0)
    monkeypatch.setattr(_pruned, "PRUNE_EARLY_WORK", 2.0)
    monkeypatch.setattr(_pruned, "LABEL_COPY_BYTES", copy_bytes)
    rng = np.random.default_rng(5)
    n, n_clusters = 2400, 40
    c = rng.standard_normal((n_clusters, 24))
    lab = rng.integers(0, n_clusters, n)
    x = c[lab] / np.linalg.norm(c[lab], axis=1, keepdims=True) + 0.3 * rng.standard_normal((n, 24)) / np.sqrt(24)
    labels = np.where(rng.random(n) < 0.02, 1 - lab % 2, lab % 2)
    got = _pruned.pruned_label_distances(as_unit_embeddings(x), labels.astype(np.int64))
    assert got is not None
    want = _brute_distances(x, labels)
    np.testing.assert_allclose(got[0], want[0], rtol=0, atol=1e-15)
    np.testing.assert_allclose(got[1], want[1], rtol=0, atol=1e-15)


def test_cells_never_drop_a_partner_within_the_angle():
    # every pair within angle alpha has its partner's cell among the row's entries, or the row is left dense
    x = as_unit_embeddings(_clusters_with_copies(1200, 6))
    cells = _cells.build_cells(x)
    xs = x[cells.order]
    nc = cells.n_core
    cos = np.clip(xs[:nc].astype(np.float64) @ xs[:nc].astype(np.float64).T, -1, 1)
    for alpha in (0.2, 0.6, 1.0):
        ((pos, cb, dense),) = cells.candidates(xs, alpha)
        entries = set(zip(pos.tolist(), cb.tolist(), strict=True))
        i, j = np.nonzero(np.arccos(cos) <= alpha)
        missing = [(a, b) for a, b in zip(i.tolist(), j.tolist(), strict=True)
                   if not dense[a] and (a, int(cells.cell[b])) not in entries]
        assert not missing, f"alpha {alpha}: {len(missing)} partners in cells the bound dropped"
    # the radius bounds every member's angle to its centre
    c64 = cells.centres.astype(np.float64)
    ang = np.arccos(np.clip(np.einsum("nd,nd->n", xs[:nc].astype(np.float64), c64[cells.cell])
                            / np.linalg.norm(c64[cells.cell], axis=1), -1, 1))
    assert np.all(ang <= cells.radius[cells.cell])


def test_uniform_data_falls_back_to_the_dense_kernels(monkeypatch):
    # no clusters: the cells cannot prune, the pruned forms decline, and the rankings (dense) stay exact
    rng = np.random.default_rng(7)
    x = rng.standard_normal((1200, 16))
    labels = rng.integers(0, 3, 1200)
    xu = as_unit_embeddings(x)
    assert _pruned.pruned_top_pairs(xu, 50) is None
    assert _pruned.pruned_label_distances(xu, labels.astype(np.int64)) is None
    monkeypatch.setattr(_pruned, "PRUNE_MIN_ROWS", 0)
    pairs, _ = brute_top_k(x, 50)
    r = rank_near_duplicates(x, 50)
    np.testing.assert_array_equal(r.pairs, pairs)
    np.testing.assert_allclose(rank_label_errors(x, labels).scores, brute_scores(x, labels), rtol=0, atol=1e-12)


@pytest.mark.parametrize("workers", [1, 4])
def test_rankings_take_the_pruned_path_from_the_size_threshold(monkeypatch, workers):
    # through the public functions, with small GEMM blocks (several strips, column chunks and tiles per phase)
    monkeypatch.setattr(_pruned, "PRUNE_MIN_ROWS", 1000)
    monkeypatch.setattr(_pruned, "PRUNE_EARLY_WORK", 2.0)
    monkeypatch.setattr(_pruned, "PRUNE_MAX_WORK", 2.0)
    monkeypatch.setattr(_pruned, "_STRIP", 64)
    monkeypatch.setattr(_pruned, "_COLS", 256)
    monkeypatch.setattr(_pruned, "_TILE", 128)
    monkeypatch.setattr(_cells, "_CHUNK", 200)
    monkeypatch.setattr(_kernels, "MAX_WORKERS", workers)
    calls = []
    for name in ("pruned_top_pairs", "pruned_label_distances"):
        fn = getattr(_pruned, name)
        def spy(*a, _fn=fn, _n=name):
            r = _fn(*a)
            calls.append((_n, r is not None))
            return r

        monkeypatch.setattr(_pruned, name, spy)
    rng = np.random.default_rng(8)
    x = _clusters_with_copies(2000, 8)
    labels = rng.integers(0, 3, 2000)
    pairs, dd = brute_top_k(x, 3000)
    r = rank_near_duplicates(x, 3000)
    np.testing.assert_array_equal(r.pairs, pairs)
    np.testing.assert_allclose(r.scores, dd, rtol=0, atol=1e-15)
    score, d_same, d_diff = label_error_scores(x, labels)
    np.testing.assert_allclose(score, brute_scores(x, labels), rtol=0, atol=1e-12)
    want = _brute_distances(x, labels)
    np.testing.assert_allclose(d_same, want[0], rtol=0, atol=1e-15)
    np.testing.assert_allclose(d_diff, want[1], rtol=0, atol=1e-15)
    assert calls == [("pruned_top_pairs", True), ("pruned_label_distances", True)]  # both ran to the end


def test_many_classes_use_the_dense_kernel():
    x = as_unit_embeddings(_clusters_with_copies(600, 11))
    assert _pruned.pruned_label_distances(x, np.arange(600, dtype=np.int64) % (_pruned.MAX_CLASSES + 1)) is None


def test_many_one_member_classes_use_the_dense_kernel():
    x = as_unit_embeddings(_clusters_with_copies(600, 9))
    codes = np.arange(600, dtype=np.int64) % 300  # 300 classes of two ...
    codes[:100] = np.arange(300, 400)  # ... and 100 of one: more than MAX_SINGLETON_ROWS
    assert _pruned.pruned_label_distances(x, codes) is None


def test_too_many_candidate_cells_fall_back_exactly(monkeypatch):
    # the candidate entries are bounded (memory): past the bound the pruned forms decline, the dense kernels run
    monkeypatch.setattr(_cells, "MAX_ENTRIES", 10)
    monkeypatch.setattr(_pruned, "PRUNE_MIN_ROWS", 1000)
    rng = np.random.default_rng(10)
    x = _clusters_with_copies(1500, 10)
    labels = rng.integers(0, 2, 1500)
    xu = as_unit_embeddings(x)
    assert _pruned.pruned_top_pairs(xu, 3000) is None
    assert _pruned.pruned_label_distances(xu, labels.astype(np.int64)) is None
    pairs, _ = brute_top_k(x, 3000)
    np.testing.assert_array_equal(rank_near_duplicates(x, 3000).pairs, pairs)
    np.testing.assert_allclose(rank_label_errors(x, labels).scores, brute_scores(x, labels), rtol=0, atol=1e-12)
