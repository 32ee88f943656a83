"""Dawid–Skene: simulated truth, CIFAR-10N real noise vs README channels and crowd-kit, orientation."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from noisycal_platform.calibration import NotIdentifiableError, dawid_skene
from tests.shared_data import needs_shared, shared_path

CIFAR = shared_path("data", "cifar10n", "cifar10n_binary_vehicle.csv")
# README of shared/data/cifar10n: empirical channels against clean_label (independent of any estimator)
CIFAR_TRUE_FPR = np.array([0.042933, 0.047667, 0.043833])
CIFAR_TRUE_FNR = np.array([0.044300, 0.051950, 0.049900])


def _simulate(n, prevalence, fpr, fnr, seed, missing=0.0):
    rng = np.random.default_rng(seed)
    y = rng.random(n) < prevalence
    u = rng.random((n, len(fpr)))
    a = np.where(y[:, None], u >= np.asarray(fnr), u < np.asarray(fpr)).astype(float)
    if missing:
        a[rng.random(a.shape) < missing] = np.nan
    return a, y


def test_recovers_simulated_channels_with_missing_labels():
    fpr, fnr = [0.05, 0.10, 0.15, 0.08], [0.12, 0.06, 0.10, 0.18]
    a, y = _simulate(200_000, 0.35, fpr, fnr, seed=1, missing=0.2)
    fit = dawid_skene(a)
    # sampling s.e. of a rate ~ sqrt(p(1-p)/n_class) ≈ 1e-3 here; 5e-3 is ~5 s.e.
    np.testing.assert_allclose(fit.fpr, fpr, atol=5e-3)
    np.testing.assert_allclose(fit.fnr, fnr, atol=5e-3)
    assert abs(fit.prevalence - y.mean()) < 5e-3
    assert fit.converged and fit.method == "dawid_skene"
    assert fit.diagnostics["starts_accepted"] >= 1
    assert fit.diagnostics["min_gap"] == pytest.approx(min(1 - np.array(fit.fpr) - fit.fnr))


def test_flipped_start_gives_the_same_answer_after_label_exchange():
    fpr, fnr = np.array([0.05, 0.10, 0.15]), np.array([0.12, 0.06, 0.10])
    a, _ = _simulate(50_000, 0.35, fpr, fnr, seed=2)
    ref = dawid_skene(a, n_starts=1)
    # start in the mirrored orientation (π, a, b) -> (1-π, 1-b, 1-a)
    mirror_start = (0.65, 1 - fnr, 1 - fpr)
    raw = dawid_skene(a, n_starts=1, init=mirror_start, orient=False)
    assert np.all(raw.gaps < 0)  # EM stayed in the mirrored mode
    np.testing.assert_allclose(1 - raw.fnr, ref.fpr, atol=1e-6)  # a' = 1 - b
    np.testing.assert_allclose(1 - raw.fpr, ref.fnr, atol=1e-6)  # b' = 1 - a
    assert 1 - raw.prevalence == pytest.approx(ref.prevalence, abs=1e-6)
    oriented = dawid_skene(a, n_starts=1, init=mirror_start)
    np.testing.assert_allclose(oriented.fpr, ref.fpr, atol=1e-6)
    np.testing.assert_allclose(oriented.fnr, ref.fnr, atol=1e-6)


def test_round_trip_fitted_channels_as_start_is_a_fixed_point():
    a, _ = _simulate(30_000, 0.4, [0.1, 0.2, 0.05], [0.05, 0.1, 0.2], seed=3)
    fit = dawid_skene(a)
    again = dawid_skene(a, n_starts=1, init=(fit.prevalence, fit.fpr, fit.fnr))
    np.testing.assert_allclose(again.fpr, fit.fpr, atol=1e-8)
    np.testing.assert_allclose(again.fnr, fit.fnr, atol=1e-8)


def test_refuses_fewer_than_three_annotators_and_uninformative_annotator():
    a, _ = _simulate(5_000, 0.4, [0.1, 0.2], [0.1, 0.1], seed=4)
    with pytest.raises(NotIdentifiableError, match="third annotator"):
        dawid_skene(a)
    rng = np.random.default_rng(99)  # independent of the simulation stream
    b, _ = _simulate(20_000, 0.4, [0.1, 0.2, 0.1], [0.1, 0.1, 0.2], seed=5)
    b[:, 2] = rng.random(len(b)) < 0.5  # coin flipper: gap 0
    with pytest.raises(NotIdentifiableError, match="informative"):
        dawid_skene(b)


def test_bad_annotation_value_is_named():
    with pytest.raises(ValueError, match=r"0\.5"):
        dawid_skene(np.array([[0, 1, 0.5], [1, 1, 1.0]]))


def _cifar():
    import polars as pl

    df = pl.read_csv(CIFAR)
    return df.select("annotator_1", "annotator_2", "annotator_3").to_numpy().astype(float)


@needs_shared(CIFAR, "shared CIFAR-10N fixture")
def test_cifar10n_recovers_readme_channels_within_0_01():
    fit = dawid_skene(_cifar())
    np.testing.assert_allclose(fit.fpr, CIFAR_TRUE_FPR, atol=0.01)
    np.testing.assert_allclose(fit.fnr, CIFAR_TRUE_FNR, atol=0.01)
    assert fit.prevalence == pytest.approx(0.40, abs=0.01)  # 20,000 / 50,000 vehicles


@needs_shared(CIFAR, "shared CIFAR-10N fixture")
def test_cifar10n_matches_crowdkit_dawid_skene():
    pd = pytest.importorskip("pandas")
    ck = pytest.importorskip("crowdkit.aggregation")
    a = _cifar()
    n = len(a)
    long = pd.DataFrame(
        {"task": np.repeat(np.arange(n), 3), "worker": np.tile([0, 1, 2], n), "label": a.ravel().astype(int)}
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        peer = ck.DawidSkene(n_iter=100).fit(long)
    e = peer.errors_
    peer_fpr = np.array([e.loc[(j, 1), 0] for j in range(3)])  # P(observed 1 | true 0)
    peer_fnr = np.array([e.loc[(j, 0), 1] for j in range(3)])  # P(observed 0 | true 1)
    fit = dawid_skene(a)
    np.testing.assert_allclose(fit.fpr, peer_fpr, atol=1e-3)
    np.testing.assert_allclose(fit.fnr, peer_fnr, atol=1e-3)
    assert fit.prevalence == pytest.approx(float(peer.priors_[1]), abs=1e-3)


def test_int8_input_with_minus_one_missing_equals_float_input():
    a, _ = _simulate(20_000, 0.3, [0.1, 0.2, 0.05], [0.05, 0.1, 0.2], seed=6, missing=0.3)
    a8 = np.where(np.isnan(a), -1, a).astype(np.int8)
    f, g = dawid_skene(a), dawid_skene(a8)
    np.testing.assert_array_equal(f.fpr, g.fpr)
    np.testing.assert_array_equal(f.fnr, g.fnr)


def test_pairwise_association_matches_brute_force():
    from noisycal_platform.calibration.channels._base import annotation_codes, pattern_counts
    from noisycal_platform.calibration.channels.dawid_skene import pairwise_association

    a, _ = _simulate(5_000, 0.4, [0.1, 0.2, 0.1], [0.1, 0.1, 0.2], seed=7, missing=0.3)
    pats, _, counts = pattern_counts(annotation_codes(a))
    z = pairwise_association(pats, counts)
    for j, k in [(0, 1), (0, 2), (1, 2)]:
        m = ~np.isnan(a[:, j]) & ~np.isnan(a[:, k])
        x, y = a[m, j], a[m, k]
        se = np.sqrt(x.mean() * (1 - x.mean()) * y.mean() * (1 - y.mean()) / m.sum())
        assert z[j, k] == pytest.approx((np.mean(x * y) - x.mean() * y.mean()) / se, rel=1e-10)
        assert z[k, j] == pytest.approx(z[j, k])
