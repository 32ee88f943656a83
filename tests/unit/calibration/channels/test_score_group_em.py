"""Shared-channel score-group EM (Hanada and Futami 2026 §F.1.2): recovery, orientation, identification guard."""

from __future__ import annotations

import numpy as np
import pytest

from noisycal_platform.calibration import NotIdentifiableError, score_group_em, score_groups


def _simulate(n, seed, fpr=(0.1, 0.2), fnr=(0.15, 0.05)):
    rng = np.random.default_rng(seed)
    s = rng.random(n)
    y = rng.random(n) < s  # calibrated scores, so score groups have different prevalences
    u = rng.random((n, len(fpr)))
    a = np.where(y[:, None], u >= np.asarray(fnr), u < np.asarray(fpr)).astype(float)
    return s, y, a


@pytest.mark.parametrize("n_groups", [2, 5])
def test_two_annotators_with_score_groups_recover_channels(n_groups):
    s, y, a = _simulate(200_000, seed=1)
    g = score_groups(s, n_groups)
    fit = score_group_em(a, g)
    np.testing.assert_allclose(fit.fpr, (0.1, 0.2), atol=0.01)
    np.testing.assert_allclose(fit.fnr, (0.15, 0.05), atol=0.01)
    true_prev = [y[g == k].mean() for k in range(n_groups)]
    np.testing.assert_allclose(fit.diagnostics["group_prevalence"], true_prev, atol=0.015)
    assert fit.converged


def test_score_groups_are_quantile_groups():
    s = np.arange(10) / 10
    np.testing.assert_array_equal(score_groups(s, 2), [0] * 5 + [1] * 5)
    assert set(score_groups(np.zeros(7), 3)) == {0}  # tied scores: empty groups dropped


def test_single_group_or_equal_prevalences_refused():
    _, _, a = _simulate(20_000, seed=2)
    with pytest.raises(NotIdentifiableError, match="single group"):
        score_group_em(a, np.zeros(len(a)))
    rng = np.random.default_rng(3)
    with pytest.raises(NotIdentifiableError, match="different class proportions"):
        score_group_em(a, rng.integers(0, 2, len(a)))
