"""Impact of cleaning (Gröger et al. 2023 Table 2): paired bootstrap of after − before, * and ° flags."""

import numpy as np
import pytest
from sklearn.metrics import average_precision_score, roc_auc_score

from noisycal_platform.cleaning.impact import cleaning_impact, significance_flag
from noisycal_platform.metrics import auprg


def test_flags():
    assert significance_flag(-0.019, -0.002) == "*"
    assert significance_flag(0.001, 0.02) == "*"
    assert significance_flag(-0.025, 0.0) == "°"  # seed Table 2: [-2.5, 0.0]°
    assert significance_flag(0.0, 0.005) == "°"
    assert significance_flag(-0.007, 0.001) == ""
    assert significance_flag(float("nan"), 0.1) == ""


def test_point_values_match_sklearn():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 300)
    s = rng.random(300) * 0.6 + 0.4 * y
    keep = rng.random(300) > 0.1
    out = {r["metric"]: r for r in cleaning_impact(y, s, keep, n_boot=200, seed=1).iter_rows(named=True)}
    assert out["auroc"]["before"] == pytest.approx(roc_auc_score(y, s))
    assert out["auroc"]["after"] == pytest.approx(roc_auc_score(y[keep], s[keep]))
    assert out["ap"]["after"] == pytest.approx(average_precision_score(y[keep], s[keep]))
    assert out["auprg"]["before"] == pytest.approx(auprg(y, s))
    assert out["ap"]["difference"] == pytest.approx(
        average_precision_score(y[keep], s[keep]) - average_precision_score(y, s)
    )
    assert out["auroc"]["n_after"] == keep.sum()


def test_keeping_everything_gives_exact_zero_bounds():
    rng = np.random.default_rng(1)
    y = rng.integers(0, 2, 100)
    s = rng.random(100)
    res = cleaning_impact(y, s, np.ones(100, bool), n_boot=100, seed=0)
    assert res["ci_low"].to_list() == [0.0] * 3 and res["ci_high"].to_list() == [0.0] * 3
    assert res["flag"].to_list() == ["°"] * 3


def test_removing_inflating_duplicates_is_significant():
    # 400 clean items (AUROC ~0.76) + 60 near-duplicate positives scored 0.99: they inflate the estimate,
    # so removing them must lower every metric, with 0 outside the CI.
    rng = np.random.default_rng(2)
    y = np.r_[rng.integers(0, 2, 400), np.ones(60, int)]
    s = np.r_[rng.normal(size=400) + y[:400], np.full(60, 5.0)]
    keep = np.r_[np.ones(400, bool), np.zeros(60, bool)]
    res = cleaning_impact(y, s, keep, n_boot=500, seed=3)
    assert (res["difference"] < 0).all() and (res["ci_high"] < 0).all()
    assert res["flag"].to_list() == ["*"] * 3
    assert (res["ci_low"] <= res["median"]).all() and (res["median"] <= res["ci_high"]).all()


def test_bad_inputs():
    with pytest.raises(ValueError, match="keep"):
        cleaning_impact([0, 1], [0.1, 0.2], [True])
    with pytest.raises(ValueError, match="removes every item"):
        cleaning_impact([0, 1], [0.1, 0.2], [False, False])
