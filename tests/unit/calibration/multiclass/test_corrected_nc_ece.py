"""Corrected one-hot labels and multi-class NC-ECE: C = 2 against the binary functions, unbiasedness, the
pattern kernel against brute force, and tracking of the clean-label ECE in a simulation with known truth."""

from __future__ import annotations

import numpy as np
import pytest

from noisycal_platform.calibration import Channel, aggregation_weights, corrected_labels, nc_ece
from noisycal_platform.calibration import plugin_prevalence as binary_plugin_prevalence
from noisycal_platform.calibration.channels import dawid_skene
from noisycal_platform.calibration.multiclass import (
    backward_matrices,
    binned_ece_multiclass,
    class_weights,
    corrected_noise_variance,
    corrected_onehot,
    estimate_confusion,
    naive_onehot,
    nc_ece_multiclass,
    plugin_prevalence,
)
from noisycal_platform.calibration.multiclass import nc_ece as mc_nc_ece
from noisycal_platform.calibration.multiclass._patterns import pattern_digits
from noisycal_platform.calibration.multiclass.corrected import mvu_pattern_targets, pattern_targets
from tests.unit.calibration.multiclass._sim import asymmetric_confusions, draw_annotations, simulate


def _binary_case(n: int = 20_000, seed: int = 1):
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < 0.3).astype(int)
    fpr, fnr = np.array([0.1, 0.2, 0.05]), np.array([0.05, 0.1, 0.2])
    a = (rng.random((n, 3)) < np.where(y[:, None] == 1, 1 - fnr, fpr)).astype(float)
    a[rng.random(a.shape) < 0.2] = np.nan
    a[:50] = np.nan  # some unannotated items
    s = np.clip(0.3 * y + 0.5 * rng.random(n), 0, 1)
    s[:8] = [0.0, 0.3, 0.5, 0.6, 0.7, 1.0, 0.2, 0.9]  # bin-edge fixtures
    a[5:8] = [0, 1, np.nan]
    return s, a, dawid_skene(a).channels


def test_two_class_corrected_labels_and_weights_equal_the_binary_ones():
    _, a, ch = _binary_case()
    pi = binary_plugin_prevalence(a, ch)
    pm = plugin_prevalence(a, ch)
    assert pm[1] == pytest.approx(pi, abs=1e-12) and pm[0] == pytest.approx(1 - pi, abs=1e-12)
    wb = aggregation_weights(ch, pi)
    wm = class_weights(np.array([[[1 - c.fpr, c.fpr], [c.fnr, 1 - c.fnr]] for c in ch]), pm)
    np.testing.assert_allclose(wm[:, 1], wb, rtol=0, atol=1e-12)
    np.testing.assert_allclose(wm[:, 0], wb, rtol=0, atol=1e-12)  # Ỹ_0 = 1 − Ỹ_1 has the same variance
    yb = corrected_labels(a, ch, wb)
    ym = corrected_onehot(a, ch)
    np.testing.assert_array_equal(np.isnan(ym[:, 1]), np.isnan(yb))
    np.testing.assert_allclose(ym[:, 1], yb, rtol=0, atol=1e-12)
    np.testing.assert_allclose(ym[:, 0], 1 - yb, rtol=0, atol=1e-12)
    # one annotator at a time: (A − a)/δ exactly as the seed writes it
    c0 = ch[0]
    one = corrected_onehot(a[:, :1], [c0], weights="equal")[:, 1]
    np.testing.assert_allclose(one, (a[:, 0] - c0.fpr) / c0.gap, rtol=0, atol=1e-12)


def test_two_class_nc_ece_equals_the_binary_nc_ece():
    s, a, ch = _binary_case()
    p = np.column_stack([1 - s, s])
    rb = nc_ece(s, a, ch)
    rm = nc_ece_multiclass(p, a, ch, kind="classwise")
    assert rm.per_class[1] == pytest.approx(rb.value, abs=1e-12)
    assert (rm.n_items, rm.n_unannotated) == (rb.n_items, rb.n_unannotated)
    got = rm.binary_results()[1].bins
    assert got["bin"].to_list() == rb.bins["bin"].to_list() and got["n"].to_list() == rb.bins["n"].to_list()
    for col in ("mean_score", "mean_corrected_label", "residual"):
        np.testing.assert_allclose(got[col].to_numpy(), rb.bins[col].to_numpy(), rtol=0, atol=1e-12)
    # top-label at C = 2: items predicted 0 see the flipped annotation 1 − A through the flipped channel
    # (a' = b, b' = a), so the binary NC-ECE of the confidence on 2K disjoint columns is the same quantity.
    pred = p.argmax(axis=1)
    a2 = np.full((len(s), 6), np.nan)
    a2[pred == 1, :3] = a[pred == 1]
    a2[pred == 0, 3:] = 1 - a[pred == 0]
    ch2 = list(ch) + [Channel(c.fnr, c.fpr) for c in ch]
    w = aggregation_weights(ch, binary_plugin_prevalence(a, ch))
    ref = nc_ece(p.max(axis=1), a2, ch2, weights=np.concatenate([w, w]))
    top = nc_ece_multiclass(p, a, ch, kind="top_label")
    assert top.value == pytest.approx(ref.value, abs=1e-12)
    assert top.n_items == ref.n_items


def test_backward_correction_is_unbiased():
    t = asymmetric_confusions(5)
    tinv = backward_matrices(t)
    for j in range(3):  # E[Ỹ | Y = y] = Σ_a T[y, a] T^{-1}[a, ·] = e_y (closed form)
        np.testing.assert_allclose(t[j] @ tinv[j], np.eye(5), rtol=0, atol=1e-12)
    rng = np.random.default_rng(2)
    y = np.repeat(np.arange(5), 40_000)
    a = draw_annotations(rng, y, t)
    ym = corrected_onehot(a[:, :1], t[:1], weights="equal")
    means = np.stack([ym[y == c].mean(axis=0) for c in range(5)])
    np.testing.assert_allclose(means, np.eye(5), rtol=0, atol=0.03)  # Monte Carlo, sd ≤ 0.008
    v = corrected_noise_variance(t[:1], np.full(5, 0.2))  # E[Var(Ỹ | Y)] = Var(Ỹ − e_Y) as E[Ỹ − e_Y | Y] = 0
    np.testing.assert_allclose(v[0], (ym - np.eye(5)[y]).var(axis=0), rtol=0.05)


def test_iv_weights_reduce_the_variance_of_the_combined_label():
    rng = np.random.default_rng(3)
    t = asymmetric_confusions(5)
    y = rng.integers(0, 5, 100_000)
    a = draw_annotations(rng, y, t)
    pi = np.full(5, 0.2)
    iv = corrected_onehot(a, t, weights="iv", prevalence=pi) - np.eye(5)[y]
    eq = corrected_onehot(a, t, weights="equal") - np.eye(5)[y]
    assert np.all(iv.var(axis=0) < eq.var(axis=0))


@pytest.mark.parametrize("kind", ["classwise", "top_label"])
def test_pattern_kernel_equals_brute_force(kind, monkeypatch):
    rng = np.random.default_rng(4)
    n, c = 3_000, 4
    t = np.full((3, c, c), 0.1)
    t[:, np.arange(c), np.arange(c)] = 0.7
    a = rng.integers(0, c, (n, 3)).astype(float)
    a[rng.random(a.shape) < 0.3] = np.nan
    p = rng.dirichlet(np.ones(c), n)
    p[0] = [1.0, 0.0, 0.0, 0.0]
    p[1] = [0.6, 0.3, 0.1, 0.0]
    res = nc_ece_multiclass(p, a, t, kind=kind, n_bins=10)
    # brute force: per-item corrected labels, explicit loops over groups and bins
    y = corrected_onehot(a, t, weights=res.weights)
    ok = ~np.isnan(y[:, 0])
    if kind == "classwise":
        groups = [(p[ok, g], y[ok, g]) for g in range(c)]
    else:
        pred = p[ok].argmax(axis=1)
        groups = [(p[ok].max(axis=1), y[ok][np.arange(ok.sum()), pred])]
    for g, (s, yy) in enumerate(groups):
        b = np.minimum(np.floor(s * 10), 9).astype(int)
        for k in range(10):
            m = b == k
            assert res.bin_n[g, k] == m.sum()
            assert res.bin_sum_label[g, k] == pytest.approx(yy[m].sum(), abs=1e-9)
            assert res.bin_sum_score[g, k] == pytest.approx(s[m].sum(), abs=1e-9)
            assert res.bin_sum_sq_residual[g, k] == pytest.approx(((yy[m] - s[m]) ** 2).sum(), rel=1e-9, abs=1e-9)
    terms = [sum(abs((yy - s)[np.minimum(np.floor(s * 10), 9) == k].sum()) for k in range(10)) / len(s)
             for s, yy in groups]
    assert res.value == pytest.approx(np.mean(terms), rel=1e-9)
    assert res.n_unannotated == int((~ok).sum())
    monkeypatch.setattr(mc_nc_ece, "_MAX_CELLS", 1)  # per-item path gives the same sums
    alt = nc_ece_multiclass(p, a, t, kind=kind, n_bins=10)
    np.testing.assert_allclose(alt.bin_sum_label, res.bin_sum_label, rtol=0, atol=1e-9)
    np.testing.assert_allclose(alt.bin_sum_sq_residual, res.bin_sum_sq_residual, rtol=0, atol=1e-9)
    assert alt.value == pytest.approx(res.value, rel=1e-9)


def test_identity_channel_with_clean_labels_is_the_plain_ece():
    p, y, _, _ = simulate(5_000, 5)
    for kind in ("classwise", "top_label"):
        nc = nc_ece_multiclass(p, y[:, None].astype(float), np.eye(5)[None], kind=kind).value
        assert nc == pytest.approx(binned_ece_multiclass(p, np.eye(5)[y], kind), abs=1e-12)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_nc_ece_with_estimated_channels_tracks_the_clean_ece_and_majority_vote_does_not(seed):
    p, y, a, _ = simulate(20_000, seed)
    fit = estimate_confusion(a)
    clean_target = np.eye(5)[y]
    mv = naive_onehot(a, 5, "majority_vote")
    for kind in ("top_label", "classwise"):
        clean = binned_ece_multiclass(p, clean_target, kind)
        est = nc_ece_multiclass(p, a, fit, kind=kind).value
        naive = binned_ece_multiclass(p, mv, kind)
        assert abs(est - clean) < 0.01, (kind, est, clean)
        assert abs(naive - clean) > 0.015, (kind, naive, clean)  # seen: 0.05 top-label, 0.022 classwise


def test_bad_inputs_name_row_and_column():
    p, _, a, t = simulate(100, 6)
    bad = p.copy()
    bad[7] *= 1.01
    with pytest.raises(ValueError, match="probs row 7 sums to"):
        nc_ece_multiclass(bad, a, t)
    bad = p.copy()
    bad[3, 2] = np.nan
    with pytest.raises(ValueError, match="probs row 3 column 2"):
        nc_ece_multiclass(bad, a, t)
    aa = a.copy()
    aa[11, 2] = 5.0
    with pytest.raises(ValueError, match="annotations row 11 column 2"):
        nc_ece_multiclass(p, aa, t)
    aa[11, 2] = -3.0
    with pytest.raises(ValueError, match="annotations row 11 column 2"):
        nc_ece_multiclass(p, aa, t, kind="classwise")
    with pytest.raises(ValueError, match="shape"):
        nc_ece_multiclass(p[:, :4], a, t)


def _pattern_targets_reference(tinv, w, labels, present):
    """`pattern_targets` before it summed per annotator: the (..., P, K, C) table and numpy's sums over K."""
    k = labels.shape[1]
    ytab = tinv[..., np.arange(k)[None, :], np.where(present, labels, 0), :]
    wp = present[:, :, None] * w[..., None, :, :]
    den = wp.sum(axis=-2)
    inc = present.any(axis=1)[:, None] & (den > 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        y = np.where(inc, (ytab * wp).sum(axis=-2) / den, 0.0)
    return y, inc


def test_pattern_targets_equal_the_reference_table():
    """Random confusion inverses and weights (some 0), 2–5 classes, 1–4 annotators, with and without replicate
    axes (inverses per replicate, fixed, or broadcast): the same labels and masks, to the last bit."""
    rng = np.random.default_rng(2312)
    for _ in range(80):
        c, k, r = int(rng.integers(2, 6)), int(rng.integers(1, 5)), int(rng.integers(1, 20))
        pats = pattern_digits(np.arange((c + 1) ** k), k, c)
        present = pats < c
        t = rng.dirichlet(np.ones(c), size=(r, k, c)) + 3 * np.eye(c)
        tinv = np.linalg.inv(t / t.sum(axis=-1, keepdims=True))
        w = rng.random((r, k, c))
        w[rng.random(w.shape) < 0.25] = 0.0
        for ti in (tinv, tinv[0], np.broadcast_to(tinv[0], tinv.shape)):
            for ww in (w, w[0]):
                y, inc = pattern_targets(ti, ww, pats, present)
                y_ref, inc_ref = _pattern_targets_reference(ti, ww, pats, present)
                assert y.shape == y_ref.shape
                np.testing.assert_array_equal(y, y_ref)
                np.testing.assert_array_equal(inc, inc_ref)


def _all_patterns(k: int, c: int):
    pats = pattern_digits(np.arange((c + 1) ** k), k, c)
    present = pats < c
    return np.where(present, pats, 0), present


def test_mvu_targets_are_unbiased_for_every_presence_set_and_the_backward_correction_for_one_annotator():
    t = asymmetric_confusions(4)
    labels, present = _all_patterns(3, 4)
    rng = np.random.default_rng(11)
    q = rng.dirichlet(np.ones(4), 6)
    target = np.array([0, 1, 2, 3, 1, 2])
    f, inc = mvu_pattern_targets(t, q, target, labels, present)
    assert f.shape == (6, labels.shape[0]) and np.array_equal(inc, present.any(axis=1))
    # the likelihood of each pattern, by explicit loops (no vectorised helper)
    lik = np.ones((4, labels.shape[0]))
    for p_ in range(labels.shape[0]):
        for j in range(3):
            if present[p_, j]:
                lik[:, p_] *= t[j, :, labels[p_, j]]
    mask = present @ (1 << np.arange(3))
    for m in range(1, 8):  # E[f | Y = y, presence set m] = 1{y = target}
        cols = mask == m
        np.testing.assert_allclose(f[:, cols] @ lik[:, cols].T, np.eye(4)[target], rtol=0, atol=1e-10)
    assert np.all(f[:, mask == 0] == 0)
    # one annotator: C patterns, C constraints: the backward correction row T^{-1}[a, target]
    f1, _ = mvu_pattern_targets(t[:1], q, target, labels[:5, :1], present[:5, :1])
    np.testing.assert_allclose(f1[:, :4], np.linalg.inv(t[0])[:, target].T, rtol=0, atol=1e-10)
    # leading replicate axes broadcast
    f2, _ = mvu_pattern_targets(np.stack([t, t[::-1]]), q, target, labels, present)
    np.testing.assert_allclose(f2[0], f, rtol=1e-9, atol=1e-12)  # batched LAPACK solves: last bits may differ


def test_mvu_targets_solve_the_constrained_least_squares_and_beat_the_iv_average():
    t = asymmetric_confusions(5)
    labels, present = _all_patterns(3, 5)
    full = np.flatnonzero(present.all(axis=1))
    rng = np.random.default_rng(12)
    q = rng.dirichlet(np.full(5, 0.7), 4)
    target = np.array([0, 2, 4, 1])
    f = mvu_pattern_targets(t, q, target, labels, present)[0][:, full]
    lik = np.prod([t[j][:, labels[full, j]] for j in range(3)], axis=0)  # (C, 125)
    iv = pattern_targets(np.linalg.inv(t), class_weights(t, np.full(5, 0.2), "iv"), labels, present)[0][full]
    for s in range(4):
        d = q[s] @ lik
        # KKT system of min Σ_p d_p f_p² s.t. lik f = e_target, solved directly (no closed form)
        kkt = np.block([[2 * np.diag(d), lik.T], [lik, np.zeros((5, 5))]])
        ref = np.linalg.solve(kkt, np.concatenate([np.zeros(full.size), np.eye(5)[target[s]]]))[: full.size]
        np.testing.assert_allclose(f[s], ref, rtol=1e-8, atol=1e-10)
        assert d @ f[s] ** 2 < d @ iv[:, target[s]] ** 2  # the iv average is feasible, so never better


def test_mvu_nc_ece_is_the_binned_sum_of_per_item_targets_and_tracks_the_clean_ece():
    rng = np.random.default_rng(13)
    p, y, a, t = simulate(20_000, 7)
    a[rng.random(a.shape) < 0.2] = np.nan
    a[:30] = np.nan
    labels, present = _all_patterns(3, 5)
    for kind in ("classwise", "top_label"):
        res = nc_ece_multiclass(p, a, t, kind=kind, weights="mvu")
        q = mc_nc_ece.score_cell_probs(p, kind, 15)
        f, _ = mvu_pattern_targets(t, q, np.repeat(np.arange(5), 15), labels, present)
        codes = np.where(np.isnan(a), 5, a).astype(int)
        key = (codes * 6 ** np.arange(3)).sum(axis=1)
        ok = ~np.isnan(a).all(axis=1)
        if kind == "classwise":
            s, grp = p, np.arange(5)[None, :]
        else:
            grp = p.argmax(axis=1)[:, None]
            s = np.take_along_axis(p, grp, axis=1)
        cell = grp * 15 + np.minimum(np.floor(s * 15), 14).astype(int)
        target = f[cell, key[:, None]]  # (n, G) per-item target
        resid = np.bincount(cell[ok].ravel(), weights=(target - s)[ok].ravel(), minlength=75).reshape(5, 15)
        if kind == "top_label":  # one row: the bins pool the predicted classes
            resid = resid.sum(axis=0)
        assert res.value == pytest.approx(np.abs(resid).sum() / s.shape[1] / ok.sum(), rel=1e-9)
        assert np.isnan(res.weights).all() and res.n_items == ok.sum()
        clean = binned_ece_multiclass(p, np.eye(5)[y], kind)
        assert abs(res.value - clean) < 0.01, (kind, res.value, clean)


def test_mvu_moments_are_unbiased_with_less_variance_than_iv_in_a_simulation_with_known_truth():
    """40 data sets of n = 2,000 with known channels: the mean of each class-bin moment's error against the
    clean-label moment is within 4 Monte Carlo s.e. of 0 for both targets, and the mvu moments' summed error
    variance is below 0.9 of the iv ones' (seen: 0.82 on 200 runs of the 3,000-item design)."""
    err = {"iv": [], "mvu": []}
    for seed in range(40):
        p, y, a, t = simulate(2_000, 100 + seed)
        clean = np.eye(5)[y]
        b = np.minimum(np.floor(p * 15), 14).astype(int) + 15 * np.arange(5)
        m_clean = np.bincount(b.ravel(), weights=(clean - p).ravel(), minlength=75) / 2_000
        for rule in err:
            res = nc_ece_multiclass(p, a, t, kind="classwise", weights=rule)
            err[rule].append(((res.bin_sum_label - res.bin_sum_score) / 2_000).ravel() - m_clean)
    for rule, e in err.items():
        e = np.array(e)
        z = e.mean(axis=0) / (e.std(axis=0, ddof=1) / np.sqrt(len(e)) + 1e-12)
        assert np.abs(z).max() < 4.0, rule
    assert np.array(err["mvu"]).var(axis=0).sum() < 0.9 * np.array(err["iv"]).var(axis=0).sum()
