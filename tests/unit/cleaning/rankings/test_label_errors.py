"""Label-error ranking: intra-/extra-class distance ratio (Gröger et al. 2023 §3.2)."""

from __future__ import annotations

import numpy as np
import pytest

from noisycal_platform.cleaning.rankings import label_error_scores, rank_label_errors

from ._brute import clustered, dense_dist


def brute_scores(x: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Dense masked minima on the full distance matrix (SelfClean's formula)."""
    d = dense_dist(x)
    n = d.shape[0]
    same = labels[:, None] == labels[None, :]
    eye = np.eye(n, dtype=bool)
    d_same = np.where(same & ~eye, d, np.inf).min(axis=1)
    d_diff = np.where(~same, d, np.inf).min(axis=1)
    singleton = same.sum(axis=1) == 1
    d_same[singleton] = np.where(~same, d, -np.inf).max(axis=1)[singleton]
    return d_diff**2 / (d_same**2 + d_diff**2)


def test_hand_computed_example():
    # unit vectors with exact inner products; d = (1 - cos)/2
    x = np.array([[1.0, 0.0], [0.28, 0.96], [0.0, 1.0], [-1.0, 0.0], [0.8, -0.6]])
    labels = np.array(["a", "a", "b", "b", "c"])  # "c" is a singleton class
    # by hand: d01=.36 d02=.5 d03=1 d04=.1 d12=.02 d13=.64 d14=.676 d23=.5 d24=.8 d34=.9
    expected = np.array(
        [
            0.1**2 / (0.36**2 + 0.1**2),  # p0: same .36, diff .1 (p4)
            0.02**2 / (0.36**2 + 0.02**2),  # p1: same .36, diff .02 (p2)
            0.02**2 / (0.5**2 + 0.02**2),  # p2: same .5, diff .02 (p1)
            0.64**2 / (0.5**2 + 0.64**2),  # p3: same .5, diff .64 (p1)
            0.1**2 / (0.9**2 + 0.1**2),  # p4 singleton: same = farthest other label .9 (p3)
        ]
    )
    r = rank_label_errors(x, labels)
    np.testing.assert_allclose(r.scores, expected, rtol=2e-6)
    assert r.order.tolist() == [2, 1, 4, 0, 3]
    _, d_same, d_diff = label_error_scores(x, labels)
    np.testing.assert_allclose(d_same, [0.36, 0.36, 0.5, 0.5, 0.9], rtol=1e-6)
    np.testing.assert_allclose(d_diff, [0.1, 0.02, 0.02, 0.64, 0.1], rtol=1e-6)


@pytest.mark.parametrize(("n", "n_cls"), [(3, 2), (50, 3), (700, 2), (3000, 5)])
def test_equals_brute_force(n, n_cls):
    rng = np.random.default_rng(n)
    x = clustered(n, seed=n)
    labels = rng.integers(0, n_cls, n)
    labels[0] = 99  # a singleton class
    r = rank_label_errors(x, labels)
    ref = brute_scores(x, labels)
    np.testing.assert_allclose(r.scores, ref, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(r.order, np.argsort(ref, kind="stable"))


def test_multi_tile_equals_brute_force(small_tiles):
    rng = np.random.default_rng(3)
    x = clustered(900, dim=16, seed=3)
    labels = np.array(["cat", "dog", "eel"])[rng.integers(0, 3, 900)]
    labels[[5, 6]] = ["yak", "zebu"]  # two singleton classes
    r = rank_label_errors(x, labels)
    ref = brute_scores(x, labels)
    np.testing.assert_allclose(r.scores, ref, rtol=0, atol=1e-12)


def test_zero_over_zero_and_conflicting_duplicates():
    v = np.array([1.0, 0.0, 0.0])
    x = np.array([v, v, v, [0.0, 1.0, 0.0]])
    labels = np.array([0, 0, 1, 1])
    r = rank_label_errors(x, labels)
    # x2 (label 1) has an identical copy with label 0 and its label mate at d=.5: score 0, first
    # x0, x1: d_same = d_diff = 0 -> defined as 0.5; x3: d_same = d_diff = .5 -> 0.5
    np.testing.assert_allclose(r.scores, [0.5, 0.5, 0.0, 0.5], atol=1e-7)
    assert r.order.tolist() == [2, 0, 1, 3]


def test_one_label_and_small_n():
    x = clustered(10)
    r = rank_label_errors(x, np.full(10, "only"))
    np.testing.assert_array_equal(r.scores, 1.0)
    np.testing.assert_array_equal(r.order, np.arange(10))
    r1 = rank_label_errors(np.ones((1, 2)), [3])
    assert r1.order.tolist() == [0] and r1.scores.tolist() == [1.0]
    # two samples, two classes: both singletons, d_same = d_diff -> 0.5
    r2 = rank_label_errors(np.array([[1.0, 0.0], [0.0, 1.0]]), ["a", "b"])
    np.testing.assert_allclose(r2.scores, [0.5, 0.5])


def test_flipped_label_ranks_first():
    rng = np.random.default_rng(7)
    c = np.eye(16)[:2] * 3
    lab = rng.integers(0, 2, 400)
    x = c[lab] + 0.5 * rng.standard_normal((400, 16))
    noisy = lab.copy()
    noisy[17] = 1 - noisy[17]
    assert rank_label_errors(x, noisy).order[0] == 17


@pytest.mark.parametrize(
    ("labels", "match"),
    [(np.zeros(4), "labels"), (np.array([0.0, np.nan, 1.0, 1.0, 0.0]), "NaN"), ([[0, 1]] * 5, "labels")],
)
def test_invalid_labels(labels, match):
    with pytest.raises(ValueError, match=match):
        rank_label_errors(clustered(5), labels)


@pytest.mark.slow
def test_larger_brute_force():
    rng = np.random.default_rng(0)
    x = clustered(6000, dim=48, n_clusters=40, seed=12)
    labels = rng.integers(0, 3, 6000)
    r = rank_label_errors(x, labels)
    np.testing.assert_allclose(r.scores, brute_scores(x, labels), rtol=0, atol=1e-12)
