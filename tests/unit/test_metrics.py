"""Tests for noisycal_platform.metrics: hand-computed AUPRG, sklearn as the peer for AUROC/AP."""

import itertools
import warnings

import numpy as np
import pytest
from sklearn.exceptions import UndefinedMetricWarning
from sklearn.metrics import average_precision_score, roc_auc_score

from noisycal_platform.metrics import (
    auprg,
    auroc,
    average_precision,
    bootstrap_counts,
    bootstrap_ranking_metrics,
)


def _auprg_reference(y, s, unit_square=True):
    """Slow loop straight from Flach & Kull (2015): points, recG=0 crossing, trapezoids."""
    y = np.asarray(y)
    s = np.asarray(s, float)
    P, N = y.sum(), (1 - y).sum()
    thresholds = sorted(set(s.tolist()), reverse=True)
    pts = [(0.0, 0.0)]
    for t in thresholds:
        pts.append((float(((s >= t) & (y == 1)).sum()), float(((s >= t) & (y == 0)).sum())))

    def gains(tp, fp):
        with np.errstate(divide="ignore"):
            return 1 - (P / N) * (P - tp) / tp, 1 - (P / N) * fp / tp

    curve = []
    for k in range(1, len(pts)):
        tp, fp = pts[k]
        rg, pg = gains(tp, fp)
        if rg >= 0:
            if not curve and rg > 0:  # insert the crossing through recG = 0
                tp0, fp0 = pts[k - 1]
                a = (P * P / (P + N) - tp0) / (tp - tp0)
                curve.append((0.0, gains(tp0 + a * (tp - tp0), fp0 + a * (fp - fp0))[1]))
            curve.append((rg, pg))
    area = 0.0
    for (x0, y0), (x1, y1) in itertools.pairwise(curve):
        if not unit_square or (y0 >= 0 and y1 >= 0):
            area += (x1 - x0) * (y0 + y1) / 2
        elif y0 > 0 or y1 > 0:
            xs = np.linspace(x0, x1, 200001)
            ys = np.maximum(np.interp(xs, [x0, x1], [y0, y1]), 0)
            area += np.trapezoid(ys, xs)
    return area


def test_auprg_hand_computed():
    # labels by descending score 1,1,0,1,0: P=3, N=2, P/N=1.5.
    # recG(TP)=1-1.5(3-TP)/TP: TP=2 -> 0.25, TP=3 -> 1; precG=1-1.5 FP/TP.
    # crossing recG=0 at TP=9/5 between (1,0) and (2,0): precG=1.
    # curve (0,1) (0.25,1) (0.25,0.25) (1,0.5) (1,0): area 0.25 + 0.75*0.375 = 0.53125
    y = [1, 1, 0, 1, 0]
    s = [5, 4, 3, 2, 1]
    assert auprg(y, s) == pytest.approx(0.53125, abs=1e-12)
    assert auprg(y, s, unit_square=False) == pytest.approx(0.53125, abs=1e-12)


def test_auprg_perfect_and_reference_random():
    assert auprg([1, 1, 0, 0, 0], [0.9, 0.8, 0.3, 0.2, 0.1]) == pytest.approx(1.0)
    rng = np.random.default_rng(3)
    for trial in range(30):
        n = int(rng.integers(5, 40))
        y = rng.integers(0, 2, n)
        if y.min() == y.max():
            continue
        s = np.round(rng.normal(size=n) + 0.8 * y * (trial % 3 - 1), 1)  # ties, good and bad rankings
        assert auprg(y, s, unit_square=False) == pytest.approx(_auprg_reference(y, s, False), abs=1e-9)
        assert auprg(y, s) == pytest.approx(_auprg_reference(y, s, True), abs=1e-6)


def test_auprg_unit_square_clips_negative_gain():
    # a ranking that puts negatives first has negative precision gain -> clipped area is smaller
    y = [0, 0, 1, 1, 0, 1]
    s = [6, 5, 4, 3, 2, 1]
    assert auprg(y, s) >= 0
    assert auprg(y, s, unit_square=False) < auprg(y, s)


@pytest.mark.parametrize("seed", range(5))
def test_auroc_ap_match_sklearn(seed):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, 200)
    s = np.round(rng.normal(size=200) + y, 1)
    w = rng.integers(0, 4, 200).astype(float)
    assert auroc(y, s) == pytest.approx(roc_auc_score(y, s), abs=1e-12)
    assert average_precision(y, s) == pytest.approx(average_precision_score(y, s), abs=1e-12)
    assert auroc(y, s, w) == pytest.approx(roc_auc_score(y, s, sample_weight=w), abs=1e-12)


@pytest.mark.parametrize("fn", [auroc, average_precision, auprg])
def test_missing_class_gives_nan_and_warning(fn):
    with pytest.warns(UndefinedMetricWarning):
        assert np.isnan(fn([1, 1, 1], [0.1, 0.2, 0.3]))
    with pytest.warns(UndefinedMetricWarning):
        assert np.isnan(fn([0, 0], [0.1, 0.2]))


def test_bad_inputs_raise():
    with pytest.raises(ValueError, match="y_true"):
        auroc([0, 2], [0.1, 0.2])
    with pytest.raises(ValueError, match="y_score"):
        auroc([0, 1], [0.1, np.nan])
    with pytest.raises(ValueError, match="equal length"):
        auroc([0, 1, 1], [0.1, 0.2])


def test_bootstrap_replicates_equal_weighted_sklearn():
    rng = np.random.default_rng(11)
    y = rng.integers(0, 2, 60)
    s = np.round(rng.normal(size=60) + y, 1)
    keep = rng.random(60) > 0.2
    res = bootstrap_ranking_metrics(y, s, n_boot=20, seed=5, masks=[np.ones(60, bool), keep])
    counts = bootstrap_counts(60, 20, np.random.default_rng(5))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for b in range(20):
            w = counts[b]
            assert res["auroc"][0, b] == pytest.approx(roc_auc_score(y, s, sample_weight=w), abs=1e-12)
            assert res["ap"][0, b] == pytest.approx(average_precision_score(y, s, sample_weight=w), abs=1e-12)
            assert res["auroc"][1, b] == pytest.approx(roc_auc_score(y, s, sample_weight=w * keep), abs=1e-12)
            assert res["auprg"][1, b] == pytest.approx(auprg(y, s, sample_weight=w * keep), abs=1e-12)


def test_bootstrap_ci_covers_true_auroc():
    # binormal model: AUROC = Phi(d / sqrt(2)); a 95% percentile CI should cover it most of the time
    from scipy.stats import norm

    d = 1.0
    truth = norm.cdf(d / np.sqrt(2))
    rng = np.random.default_rng(0)
    hits = 0
    reps = 40
    for _ in range(reps):
        y = rng.integers(0, 2, 150)
        s = rng.normal(size=150) + d * y
        boots = bootstrap_ranking_metrics(y, s, n_boot=300, seed=rng)["auroc"][0]
        lo, hi = np.nanpercentile(boots, [2.5, 97.5])
        hits += lo <= truth <= hi
    assert hits / reps >= 0.85
