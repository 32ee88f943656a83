"""Aggregation weights (Hanada and Futami 2026 §4.4, §C.6, §F.4)."""

from __future__ import annotations

import numpy as np
import pytest

from noisycal_platform.calibration import Channel, aggregation_weights, corrected_noise_variance

CH = [Channel(0.10, 0.20), Channel(0.05, 0.10), Channel(0.25, 0.15)]


def test_research_note_fixture():
    # calibration_anchors §5(3): π = 0.5477 → v̄ = (0.2619, 0.0980, 0.4296), w = (0.2335, 0.6242, 0.1423)
    np.testing.assert_allclose(corrected_noise_variance(CH, 0.5477), [0.2619, 0.0980, 0.4296], atol=1e-4)
    np.testing.assert_allclose(aggregation_weights(CH, 0.5477), [0.2335, 0.6242, 0.1423], atol=1e-4)


def test_iv_minimises_residual_variance_on_a_grid():
    pi = 0.3
    v = np.array([(pi * c.fnr * (1 - c.fnr) + (1 - pi) * c.fpr * (1 - c.fpr)) / c.gap**2 for c in CH])
    grid = np.linspace(0, 1, 201)
    best, best_w = np.inf, None
    for w1 in grid:  # brute force over the simplex: Σ w_j² v̄_j
        for w2 in grid[grid <= 1 - w1 + 1e-12]:
            w = np.array([w1, w2, 1 - w1 - w2])
            val = (w**2) @ v
            if val < best:
                best, best_w = val, w
    w_iv = aggregation_weights(CH, pi)
    assert (w_iv**2) @ v <= best * (1 + 1e-9)  # BLAS dot: relative slack
    np.testing.assert_allclose(w_iv, best_w, atol=0.01)


def test_zero_variance_annotators_share_all_weight():
    w = aggregation_weights([Channel(0, 0), Channel(0.1, 0.1), Channel(0, 0)], 0.4)
    np.testing.assert_allclose(w, [0.5, 0.0, 0.5])


def test_other_rules():
    np.testing.assert_allclose(aggregation_weights(CH, rule="equal"), [1 / 3] * 3)
    g = np.array([0.7, 0.85, 0.6])
    np.testing.assert_allclose(aggregation_weights(CH, rule="gap"), g / g.sum())
    np.testing.assert_allclose(aggregation_weights(CH, rule="sqgap"), g**2 / (g**2).sum())


def test_bad_arguments():
    with pytest.raises(ValueError, match="prevalence"):
        aggregation_weights(CH, None, rule="iv")
    with pytest.raises(ValueError, match="prevalence"):
        aggregation_weights(CH, 1.5)
    with pytest.raises(ValueError, match="rule"):
        aggregation_weights(CH, 0.5, rule="best")
