"""Multi-class corrected recalibration: C = 2 against the binary temperature/histogram fits, recovery of a
known temperature, the unbounded objective, the classwise histogram against brute force, JSON round trip."""

from __future__ import annotations

import json

import numpy as np
import pytest

from noisycal_platform.calibration import UnboundedObjectiveError, fit_recalibrator
from noisycal_platform.calibration.channels import dawid_skene
from noisycal_platform.calibration.multiclass import (
    MulticlassRecalibrator,
    corrected_onehot,
    estimate_confusion,
    fit_multiclass_recalibrator,
)
from tests.unit.calibration.multiclass._sim import asymmetric_confusions, draw_annotations


def _tempered(n: int, seed: int, temperature: float, c: int = 5):
    """Truth η = softmax(g); predictor p = softmax(g / T_true·…) overconfident, so the clean optimum of
    temperature scaling is T_true (p^{1/T} ∝ softmax(g))."""
    rng = np.random.default_rng(seed)
    g = rng.normal(0, 1.5, size=(n, c))
    eta = np.exp(g - g.max(axis=1, keepdims=True))
    eta /= eta.sum(axis=1, keepdims=True)
    y = np.minimum((rng.random((n, 1)) > np.cumsum(eta, axis=1)).sum(axis=1), c - 1)
    h = temperature * g
    p = np.exp(h - h.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    return p, y, rng


def test_two_class_temperature_and_histogram_equal_the_binary_fits():
    rng = np.random.default_rng(1)
    n = 20_000
    z = rng.normal(0, 2, n)
    y = (rng.random(n) < 1 / (1 + np.exp(-z))).astype(int)
    s = 1 / (1 + np.exp(-1.7 * z))
    fpr, fnr = np.array([0.1, 0.2, 0.05]), np.array([0.05, 0.1, 0.2])
    a = (rng.random((n, 3)) < np.where(y[:, None] == 1, 1 - fnr, fpr)).astype(float)
    ch = dawid_skene(a).channels
    p = np.column_stack([1 - s, s])
    rb = fit_recalibrator(s, a, ch, method="temperature")
    rm = fit_multiclass_recalibrator(p, a, ch, method="temperature")
    # both minimise the same convex 1-D loss with the same bounded optimiser (xatol 1e-10 on θ = 1/T)
    assert rm.params["temperature"] == pytest.approx(rb.params["temperature"], rel=1e-6)
    np.testing.assert_allclose(rm.predict(p)[:, 1], rb.predict(s), rtol=0, atol=1e-6)
    hb = fit_recalibrator(s, a, ch, method="histogram", n_bins=10)
    hm = fit_multiclass_recalibrator(p, a, ch, method="histogram", n_bins=10)
    np.testing.assert_allclose(np.asarray(hm.params["values"])[:, 1], hb.params["values"], rtol=0, atol=1e-12)


def test_corrected_temperature_recovers_the_true_temperature_and_majority_vote_does_not():
    p, y, rng = _tempered(30_000, 2, temperature=1.7)
    t = asymmetric_confusions(5)
    a = draw_annotations(rng, y, t)
    fit = estimate_confusion(a)
    clean = fit_multiclass_recalibrator(p, y[:, None].astype(float), np.eye(5)[None], method="temperature")
    corr = fit_multiclass_recalibrator(p, a, fit, method="temperature")
    naive = fit_multiclass_recalibrator(p, a, corrected=False, method="temperature")
    assert clean.params["temperature"] == pytest.approx(1.7, abs=0.05)
    assert corr.params["temperature"] == pytest.approx(1.7, abs=0.1)
    assert abs(naive.params["temperature"] - 1.7) > 0.3  # noisy labels look like an under-confident truth
    assert corr.converged and not corr.diagnostics["at_bound"]


def test_unbounded_corrected_objective_raises_instead_of_returning_t_near_zero():
    # T = [[0.7, 0.3], [0.3, 0.7]]: answer 0 has corrected label T^{-1}[0] = (1.75, −0.75). For p = (0.9, 0.1)
    # the recession slope max_c z_c − Σ_c Ỹ_c z_c = 0.75·(log 0.1 − log 0.9) < 0: L(θ) → −∞ as θ = 1/T → ∞.
    t = np.array([[[0.7, 0.3], [0.3, 0.7]]])
    p = np.array([[0.9, 0.1], [0.8, 0.2]])
    a = np.array([[0.0], [0.0]])
    with pytest.raises(UnboundedObjectiveError, match="T → 0"):
        fit_multiclass_recalibrator(p, a, t, method="temperature")


def test_temperature_bound_is_recorded_when_active():
    # all answers agree with a very confident predictor: the clean optimum is T → 0 along a bounded loss that
    # keeps decreasing; the recession slope is 0 (not < 0), so the fit stops at T = 0.01 and says so
    p = np.array([[0.6, 0.4], [0.3, 0.7]] * 50)
    a = p.argmax(axis=1)[:, None].astype(float)
    r = fit_multiclass_recalibrator(p, a, np.eye(2)[None], method="temperature")
    assert r.diagnostics["at_bound"] and not r.converged
    assert r.params["temperature"] == pytest.approx(0.01, rel=1e-3)


def test_classwise_histogram_equals_clipped_bin_means():
    rng = np.random.default_rng(3)
    n, c, nb = 4_000, 4, 8
    p = rng.dirichlet(np.ones(c), n)
    t = np.full((3, c, c), 0.1)
    t[:, np.arange(c), np.arange(c)] = 0.7
    a = draw_annotations(rng, rng.integers(0, c, n), t, missing=0.2)
    r = fit_multiclass_recalibrator(p, a, t, method="histogram", n_bins=nb)
    y = corrected_onehot(a, t)
    ok = ~np.isnan(y[:, 0])
    values = np.asarray(r.params["values"])
    for k in range(c):
        b = np.minimum(np.floor(p[ok, k] * nb), nb - 1)
        for m in range(nb):
            sel = b == m
            want = np.clip(y[ok, k][sel].mean(), 0, 1) if sel.any() else (m + 0.5) / nb
            assert values[m, k] == pytest.approx(want, abs=1e-12)
    q = r.predict(p)
    np.testing.assert_allclose(q.sum(axis=1), 1.0, rtol=0, atol=1e-12)
    back = MulticlassRecalibrator.from_dict(json.loads(json.dumps(r.to_dict())))
    np.testing.assert_array_equal(back.predict(p), q)
