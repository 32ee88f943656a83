"""Assumption checks (seed 000 §D.7) flag simulated violations and stay quiet on clean simulations."""

import numpy as np
import pytest

from noisycal_platform.calibration.diagnostics import assumption_checks

FPR = np.array([0.10, 0.05, 0.25])
FNR = np.array([0.20, 0.10, 0.15])


def _sim(n, seed, violation=None):
    """Calibrated scores s ~ Beta(2, 3); "copy": annotator 1 copies annotator 0 on 30% of items; "score":
    annotator 1's FPR rises linearly from 0.05 (s = 0) to 0.30 (s = 1)."""
    rng = np.random.default_rng(seed)
    s = rng.beta(2, 3, n)
    y = rng.random(n) < s
    fpr = np.broadcast_to(FPR, (n, 3)).copy()
    if violation == "score":
        fpr[:, 1] = 0.05 + 0.25 * s
    a = (rng.random((n, 3)) < np.where(y[:, None], 1 - FNR, fpr)).astype(float)
    if violation == "copy":
        copied = rng.random(n) < 0.3
        a[copied, 1] = a[copied, 0]
    return a, s


def _flag_rates(n_runs, n_replicates, violation):
    res = [assumption_checks(*_sim(5000, 700 + r, violation), n_replicates=n_replicates, seed=r) for r in range(n_runs)]
    return (np.mean([c.independence_p_value < 0.05 for c in res]), np.mean([c.invariance_p_value < 0.05 for c in res]))


def test_two_annotators_cannot_be_checked():
    a, s = _sim(500, 0)
    res = assumption_checks(a[:, :2], s)
    assert np.isnan(res.independence_p_value) and "three" in res.note


def test_missing_annotations_are_kept_and_checks_run():
    a, s = _sim(3000, 1)
    a[np.random.default_rng(2).random(a.shape) < 0.2] = np.nan
    res = assumption_checks(a, s, n_replicates=60)
    assert 0 < res.independence_p_value <= 1 and 0 < res.invariance_p_value <= 1


def test_fast_version_flags_violations_not_clean_data():
    ind, inv = _flag_rates(3, 80, None)
    assert ind <= 1 / 3 and inv <= 1 / 3
    assert _flag_rates(3, 80, "copy")[0] >= 2 / 3
    assert _flag_rates(3, 80, "score")[1] >= 2 / 3


@pytest.mark.slow
def test_flag_rates_at_n_5000():
    rates = {v: _flag_rates(100, 200, v) for v in (None, "copy", "score")}
    print(rates)
    assert rates[None][0] <= 0.10 and rates[None][1] <= 0.10
    assert rates["copy"][0] >= 0.90  # dependence: the conditional-independence check
    assert rates["score"][1] >= 0.90  # score-dependent channel: the invariance check
