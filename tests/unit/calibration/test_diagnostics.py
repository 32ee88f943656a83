"""Assumption checks (Hanada and Futami 2026 §D.7) flag simulated violations and stay quiet on clean simulations."""

import numpy as np
import pytest

from noisycal_platform.calibration.diagnostics import _pooled_sd, _trend_contrasts, assumption_checks

FPR = np.array([0.10, 0.05, 0.25])
FNR = np.array([0.20, 0.10, 0.15])


def _sim(n, seed, violation=None, shape=(2, 3)):
    """Calibrated scores s ~ Beta(2, 3) (Beta(0.1, 0.1): well separated, score groups almost pure); "copy":
    annotator 1 copies annotator 0 on 30% of items; "score": annotator 1's FPR rises from 0.05 (s = 0) to 0.30."""
    rng = np.random.default_rng(seed)
    s = rng.beta(*shape, n)
    y = rng.random(n) < s
    fpr = np.broadcast_to(FPR, (n, 3)).copy()
    if violation == "score":
        fpr[:, 1] = 0.05 + 0.25 * s
    a = (rng.random((n, 3)) < np.where(y[:, None], 1 - FNR, fpr)).astype(float)
    if violation == "copy":
        copied = rng.random(n) < 0.3
        a[copied, 1] = a[copied, 0]
    return a, s


def _flag_rates(n_runs, n_replicates, violation, n=5000, shape=(2, 3)):
    sims = (_sim(n, 700 + r, violation, shape) for r in range(n_runs))
    res = [assumption_checks(a, s, n_replicates=n_replicates, seed=r) for r, (a, s) in enumerate(sims)]
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


def test_trend_contrasts_are_the_weighted_score_sums():
    """Σ_g (g − ḡ)(x_gj − n_gj θ̂_j) / sqrt(θ̂_j(1 − θ̂_j) Σ_g n_gj (g − ḡ)²) written out with loops over groups and
    patterns (posteriors by Bayes' rule)."""
    rng = np.random.default_rng(5)
    pats = np.array([[0, 0, 1], [1, 1, 0], [1, 2, 1], [0, 1, 1], [1, 1, 1]], dtype=np.int8)
    counts = rng.integers(1, 40, size=(1, 3, len(pats))).astype(float)
    prior, fpr, fnr = np.array([[0.2, 0.5, 0.9]]), np.array([[0.1, 0.2, 0.15]]), np.array([[0.3, 0.1, 0.05]])
    got = _trend_contrasts(counts, pats, prior, fpr, fnr)[0]
    n = np.zeros((2, 3, 3))  # (class, group, annotator): posterior-weighted items labelled by j
    x = np.zeros((2, 3, 3))  # their errors: a negative answering 1, a positive answering 0
    for g in range(3):
        for p, row in enumerate(pats):
            like = [1.0, 1.0]
            for j, v in enumerate(row):
                if v != 2:
                    like[0] *= fpr[0, j] if v == 1 else 1 - fpr[0, j]
                    like[1] *= 1 - fnr[0, j] if v == 1 else fnr[0, j]
            post1 = prior[0, g] * like[1] / (prior[0, g] * like[1] + (1 - prior[0, g]) * like[0])
            for j, v in enumerate(row):
                if v != 2:
                    for cls, w in ((0, 1 - post1), (1, post1)):
                        n[cls, g, j] += counts[0, g, p] * w
                        x[cls, g, j] += counts[0, g, p] * w * (v == 1 if cls == 0 else v == 0)
    expected = []
    for cls in (0, 1):
        for j in range(3):
            theta = x[cls, :, j].sum() / n[cls, :, j].sum()
            g_bar = (n[cls, :, j] * np.arange(3)).sum() / n[cls, :, j].sum()
            score = sum((g - g_bar) * (x[cls, g, j] - n[cls, g, j] * theta) for g in range(3))
            var = theta * (1 - theta) * sum(n[cls, g, j] * (g - g_bar) ** 2 for g in range(3))
            expected.append(score / np.sqrt(var))
    np.testing.assert_allclose(got, expected, rtol=1e-9)


def test_scale_pools_the_observed_statistic_with_the_replicates():
    """The s.d. that standardises the checks' statistics is taken over observed + replicates (R + 1 values), so
    the statistic is one symmetric function of all tables: by hand, values 3 | 1, −1 → mean 1, s.d.
    sqrt(((3−1)² + 0² + (−1−1)²) / 2) = 2; values 0 | 2, 4 → s.d. 2."""
    got = _pooled_sd(np.array([3.0, 0.0]), np.array([[1.0, 2.0], [-1.0, 4.0]]))
    np.testing.assert_allclose(got, [2.0, 2.0], rtol=1e-12)
    assert np.isnan(_pooled_sd(np.array([1.0]), np.array([[2.0]]))).all()  # one replicate: no scale


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


@pytest.mark.slow
def test_clean_flag_rate_with_well_separated_scores():
    """Score groups that hold almost no item of one class (as a sharp predictor gives): still quiet."""
    ind, inv = _flag_rates(100, 200, None, n=1000, shape=(0.1, 0.1))
    print({"independence": ind, "invariance": inv})
    assert ind <= 0.10 and inv <= 0.10
