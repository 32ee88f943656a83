"""Sample regimes (Hanada and Futami 2026 §C.2–C.4) and the toy simulation with known truth (§6.1)."""

from __future__ import annotations

import numpy as np
import pytest

from noisycal_platform.calibration import (
    Channel,
    aggregation_weights,
    binned_ece,
    corrected_labels,
    estimate_channels,
    naive_targets,
    nc_ece,
    nc_ece_estimated,
    regime_partition,
)

FPR, FNR = np.array([0.1, 0.2, 0.15]), np.array([0.15, 0.1, 0.2])
CH = [Channel(f, b) for f, b in zip(FPR, FNR, strict=True)]


def _toy(n, seed):
    """Calibrated toy condition of §6.1: s ~ U(0, 1), Y ~ Bernoulli(s) (true ECE 0), three annotators."""
    rng = np.random.default_rng(seed)
    s = rng.random(n)
    y = rng.random(n) < s
    a = np.where(y[:, None], rng.random((n, 3)) >= FNR, rng.random((n, 3)) < FPR).astype(float)
    return s, y.astype(float), a


def test_partitions():
    assert set(regime_partition(10, "reuse")) == {0}
    split = regime_partition(1000, "split", fit_fraction=0.3, seed=1)
    assert (split == 0).sum() == 300
    cf = regime_partition(1001, "cross_fit", n_folds=3, seed=1)
    assert sorted(np.bincount(cf)) == [333, 334, 334]
    np.testing.assert_array_equal(cf, regime_partition(1001, "cross_fit", n_folds=3, seed=1))
    with pytest.raises(ValueError, match="regime"):
        regime_partition(10, "bootstrap")


def test_reuse_equals_nc_ece_with_the_fitted_channels():
    s, _, a = _toy(5_000, seed=0)
    res = nc_ece_estimated(s, a, regime="reuse", n_bins=10)
    fit = estimate_channels(a)
    w = aggregation_weights(fit.channels, fit.prevalence)
    assert res.value == pytest.approx(nc_ece(s, a, fit.channels, weights=w, n_bins=10).value, rel=1e-9, abs=1e-12)


def test_cross_fit_aggregates_held_out_bin_moments_on_one_partition():
    s, _, a = _toy(4_000, seed=1)
    res = nc_ece_estimated(s, a, regime="cross_fit", n_folds=2, n_bins=10, seed=3)
    fold = res.fold
    total = np.zeros(10)
    b = np.minimum(np.floor(s * 10), 9).astype(int)
    for f in range(2):  # by hand: fit on the other fold, sum held-out (Ỹ − s) per bin
        fit = estimate_channels(a[fold != f])
        w = aggregation_weights(fit.channels, fit.prevalence)
        yt = corrected_labels(a[fold == f], fit.channels, w)
        total += np.bincount(b[fold == f], weights=yt - s[fold == f], minlength=10)
    assert res.value == pytest.approx(np.abs(total).sum() / len(s), rel=1e-9, abs=1e-12)
    assert len(res.fits) == 2


def test_toy_simulation_known_truth():
    """§6.1: NC-ECE error vs oracle ECE falls with n; estimated ≈ supplied channels; naive stays biased."""
    reps = 12
    err = {}
    for n in (500, 8_000):
        e_sup, e_est, e_naive = [], [], []
        for r in range(reps):
            s, y, a = _toy(n, seed=1000 * n + r)
            oracle = binned_ece(s, y, 10)
            w = aggregation_weights(CH, 0.5)
            e_sup.append(abs(nc_ece(s, a, CH, weights=w, n_bins=10).value - oracle))
            e_est.append(
                abs(nc_ece_estimated(s, a, regime="reuse", n_bins=10, n_starts=2, seed=r).value - oracle)
            )
            e_naive.append(abs(binned_ece(s, naive_targets(a, "majority_vote"), 10) - oracle))
        err[n] = (np.mean(e_sup), np.mean(e_est), np.mean(e_naive))
    assert err[8_000][0] < 0.6 * err[500][0]  # supplied channels: error falls with n
    assert err[8_000][1] < 0.6 * err[500][1]  # estimated channels: error falls with n
    for n in err:  # estimated channels perform close to supplied ones
        assert err[n][1] < 1.5 * err[n][0] + 0.005
    # naive majority vote: E[MV | s] = P(MV=1|Y=0) + (P(MV=1|Y=1) − P(MV=1|Y=0))·s; its bias stays
    a0 = FPR
    p_mv0 = a0[0] * a0[1] + a0[0] * a0[2] + a0[1] * a0[2] - 2 * a0.prod()
    t1 = 1 - FNR
    p_mv1 = t1[0] * t1[1] + t1[0] * t1[2] + t1[1] * t1[2] - 2 * t1.prod()
    grid = np.linspace(0, 1, 100_001)
    bias = np.mean(np.abs(p_mv0 + (p_mv1 - p_mv0) * grid - grid))  # population ECE of MV, fine bins
    assert bias > 0.02
    assert err[8_000][2] > 0.5 * bias
    assert err[8_000][2] > 3 * err[8_000][1]


@pytest.mark.slow
def test_split_has_larger_error_than_reuse_and_cross_fit():
    """§6.1 Table 1 direction at N = 8000: reuse and cross-fitting beat splitting."""
    errs = {"split": [], "reuse": [], "cross_fit": []}
    for r in range(30):
        s, y, a = _toy(8_000, seed=7_000 + r)
        oracle = binned_ece(s, y, 10)
        for regime in errs:
            v = nc_ece_estimated(s, a, regime=regime, n_bins=10, n_starts=2, seed=r).value
            errs[regime].append(abs(v - oracle))
    m = {k: np.mean(v) for k, v in errs.items()}
    assert m["reuse"] < m["split"] and m["cross_fit"] < m["split"]
