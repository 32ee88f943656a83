"""Paired stratified bootstrap: quotas preserved in every replicate, AUROC per replicate equals sklearn on the
materialised resample, point estimates equal the direct audit metrics (Rethinking Correctness 2026 §3.2)."""

import warnings

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from noisycal_platform.correctness.audit import human_validation_consistency, ue_distortion
from noisycal_platform.correctness.bootstrap import (
    bootstrap_auroc,
    paired_bootstrap,
    percentile_ci,
    stratified_counts,
)


def _design(seed=0, n_groups=3, per_stratum=6):
    rng = np.random.default_rng(seed)
    group = np.repeat(np.arange(n_groups), 2 * per_stratum)
    em = np.tile(np.r_[np.ones(per_stratum), np.zeros(per_stratum)], n_groups).astype(bool)
    hc = np.where(em, rng.random(group.size) < 0.95, rng.random(group.size) < 0.2)
    acc = np.stack([em, hc ^ (rng.random(group.size) < 0.15), rng.random(group.size) < 0.5], axis=1)
    u = np.round(rng.random((group.size, 2)), 1)  # coarse -> many ties
    return acc, hc, u, group, em


def test_strata_counts_preserved_in_every_replicate():
    strata = np.array([0] * 5 + [1] * 3 + [2] * 7 + [0] * 2)
    w = stratified_counts(strata, 2000, np.random.default_rng(3))
    assert w.shape == (2000, strata.size) and w.dtype == np.float32
    for s in np.unique(strata):
        assert np.all(w[:, strata == s].sum(axis=1) == np.sum(strata == s))
    assert np.all(w >= 0) and np.all(w == np.round(w))


def test_counts_reproducible_from_seed():
    s = np.repeat([0, 1], 10)
    assert np.array_equal(stratified_counts(s, 50, 7), stratified_counts(s, 50, 7))
    assert not np.array_equal(stratified_counts(s, 50, 7), stratified_counts(s, 50, 8))


def test_bootstrap_auroc_equals_sklearn_on_every_replicate():
    rng = np.random.default_rng(0)
    n = 60
    u = np.round(rng.normal(size=n), 1)  # ties
    y = rng.random(n) < 0.4
    strata = (rng.random(n) < 0.5).astype(int)
    w = stratified_counts(strata, 200, rng)
    got = bootstrap_auroc(w, u, y)
    checked = 0
    for b in range(w.shape[0]):
        idx = np.repeat(np.arange(n), w[b].astype(int))
        if y[idx].all() or not y[idx].any():
            assert np.isnan(got[b])
            continue
        assert got[b] == pytest.approx(roc_auc_score(y[idx], u[idx]), abs=1e-12)
        checked += 1
    assert checked > 150


def test_bootstrap_auroc_degenerate_replicate_is_nan():
    w = np.array([[2, 0, 1], [1, 1, 1]], dtype=np.float32)
    out = bootstrap_auroc(w, [0.3, 0.9, 0.1], [False, True, False])
    assert np.isnan(out[0]) and out[1] == pytest.approx(1.0)


def test_paired_bootstrap_point_estimate_equals_direct_metrics():
    acc, hc, u, group, em = _design()
    crit = ("em", "noisy", "coin")
    point = paired_bootstrap(
        acc,
        hc,
        u,
        group,
        em,
        criteria=crit,
        ue_methods=("a", "b"),
        counts=np.ones((1, hc.size), dtype=np.float32),
    )
    for ci in range(len(crit)):
        assert point.h_f()[0, ci] == pytest.approx(human_validation_consistency(acc[:, ci], hc, group))
        d, undefined = ue_distortion({"a": u[:, 0], "b": u[:, 1]}, acc[:, ci], hc, group)
        got_d, got_undef = point.d_f()
        assert got_d[0, ci] == pytest.approx(d, abs=1e-12)
        assert got_undef[0, ci] == undefined


def test_paired_bootstrap_replicates_match_materialised_resamples():
    acc, hc, u, group, em = _design(seed=1)
    crit = ("em", "noisy", "coin")
    w = stratified_counts(group * 2 + em, 8, 5)
    rep = paired_bootstrap(acc, hc, u, group, em, criteria=crit, ue_methods=("a", "b"), counts=w)
    h, (d, _) = rep.h_f(), rep.d_f()
    for b in range(w.shape[0]):
        idx = np.repeat(np.arange(hc.size), w[b].astype(int))
        for ci in range(len(crit)):
            assert h[b, ci] == pytest.approx(human_validation_consistency(acc[idx, ci], hc[idx], group[idx]))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                dd, _ = ue_distortion({"a": u[idx, 0], "b": u[idx, 1]}, acc[idx, ci], hc[idx], group[idx])
            if np.isnan(dd):
                assert np.isnan(d[b, ci])
            else:
                assert d[b, ci] == pytest.approx(dd, abs=1e-12)


def test_paired_bootstrap_is_paired_and_seeded():
    acc, hc, u, group, em = _design(seed=2)
    acc2 = np.concatenate([acc, acc[:, :1]], axis=1)  # a duplicate criterion
    kw = {"criteria": ("em", "noisy", "coin", "em_again"), "ue_methods": ("a", "b"), "n_boot": 200}
    r1 = paired_bootstrap(acc2, hc, u, group, em, seed=11, **kw)
    r2 = paired_bootstrap(acc2, hc, u, group, em, seed=11, **kw)
    assert np.array_equal(r1.h_group, r2.h_group, equal_nan=True)
    assert np.array_equal(r1.auroc, r2.auroc, equal_nan=True)
    # paired: an identical criterion gives an identical replicate series, so the difference is exactly 0
    assert np.array_equal(r1.h_f()[:, 0], r1.h_f()[:, 3])
    assert np.array_equal(r1.d_f()[0][:, 0], r1.d_f()[0][:, 3], equal_nan=True)


def test_paired_bootstrap_validates():
    acc, hc, u, group, em = _design()
    with pytest.raises(ValueError, match="accepted"):
        paired_bootstrap(acc[:, :2], hc, u, group, em, criteria=("a", "b", "c"), ue_methods=("a", "b"))
    u_bad = u.copy()
    u_bad[0, 1] = np.nan
    with pytest.raises(ValueError, match=r"\['b'\]"):
        paired_bootstrap(acc, hc, u_bad, group, em, criteria=("a", "b", "c"), ue_methods=("a", "b"))


def test_percentile_ci():
    x = np.arange(1001, dtype=float)[:, None]
    lo, hi = percentile_ci(x, 0.95)
    assert lo[0] == pytest.approx(25.0) and hi[0] == pytest.approx(975.0)
    with pytest.raises(ValueError, match="level"):
        percentile_ci(x, 1.5)
