"""Multi-class calibration test: agreement with the plug-in and the binary test, refit bookkeeping, bad inputs,
and its guarantees by simulation with known truth (5 classes, 3 annotators with asymmetric confusion matrices,
diagonals 0.7–0.9, every item labelled by all three; heavy versions marked slow)."""

from __future__ import annotations

import numpy as np
import pytest

from noisycal_platform.calibration import calibration_test
from noisycal_platform.calibration.channels import NotIdentifiableError
from noisycal_platform.calibration.multiclass import (
    binned_ece_multiclass,
    calibration_test_multiclass,
    estimate_confusion,
    known_confusion,
    nc_ece_multiclass,
)
from tests.unit.calibration.multiclass._sim import asymmetric_confusions, draw_annotations

C = 5
T = asymmetric_confusions(C, accuracy=(0.7, 0.9))  # diagonals in [0.7, 0.9], rows not symmetric


def _true_probs(rng: np.random.Generator, n: int) -> np.ndarray:
    g = rng.normal(0.0, 1.2, size=(n, C)) + np.linspace(0.5, -0.5, C)
    e = np.exp(g - g.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _tempered(p: np.ndarray, power: float) -> np.ndarray:
    q = p**power
    return q / q.sum(axis=1, keepdims=True)


def _draw_classes(rng: np.random.Generator, p: np.ndarray) -> np.ndarray:
    return np.minimum((rng.random((len(p), 1)) > np.cumsum(p, axis=1)).sum(axis=1), C - 1)


def _sim(n: int, seed: int, miscalibrated: bool = False):
    """(probs, annotations): Y ~ Categorical(p_true); the predictor is p_true or p ∝ p_true^1.5."""
    rng = np.random.default_rng(seed)
    p_true = _true_probs(rng, n)
    y = _draw_classes(rng, p_true)
    a = draw_annotations(rng, y, T)
    return (_tempered(p_true, 1.5) if miscalibrated else p_true), a


_TRUTH: dict[tuple[str, int], float] = {}


def _population(kind: str, n: int = 2_000_000) -> float:
    """Population NC-ECE of the tempered predictor: the binned ECE against E[e_Y | x] = p_true (the clean
    labels' conditional mean) over n draws of x (2,000,000: error about 1e-4)."""
    if (kind, n) not in _TRUTH:
        p_true = _true_probs(np.random.default_rng(12345), n)
        _TRUTH[kind, n] = binned_ece_multiclass(_tempered(p_true, 1.5), p_true, kind=kind)
    return _TRUTH[kind, n]


@pytest.mark.parametrize("kind", ["top_label", "classwise"])
def test_plugin_value_is_nc_ece_multiclass_with_the_fitted_channels(kind):
    p, a = _sim(2000, 1, True)
    res = calibration_test_multiclass(p, a, kind=kind, weights="iv", n_boot=40)
    fit = estimate_confusion(a, C, seed=0)
    ref = nc_ece_multiclass(p, a, fit, kind=kind, weights="iv", prevalence=fit.prevalence)
    assert res.nc_ece == pytest.approx(ref.value, rel=1e-9)
    assert res.channels_refit and res.method == "dawid_skene" and res.n_boot == 40
    assert res.weights.shape == (3, C) and res.channels == () and np.isnan(res.prevalence)
    assert res.bins.height == int(np.count_nonzero(ref.bin_n))
    # the moments are the per-bin residuals times the bin share; their absolute sum (averaged over classes) is the value
    mom = res.bins["moment"].to_numpy()
    groups = C if kind == "classwise" else 1
    assert np.abs(mom).sum() / groups == pytest.approx(res.nc_ece, rel=1e-9)
    known = calibration_test_multiclass(p, a, T, kind=kind, weights="iv", n_boot=40)
    assert not known.channels_refit and known.method == "known"
    assert known.nc_ece == pytest.approx(nc_ece_multiclass(p, a, T, kind=kind).value, rel=1e-9)
    assert known.n_unidentified_boot == 0 and known.n_unidentified_null == 0


def test_two_classes_classwise_equals_the_binary_test_on_the_plugin():
    """C = 2, classwise: class 0's bins mirror class 1's and Ỹ_0 = 1 − Ỹ_1, so the plug-in NC-ECE and the class-1
    moments are those of the binary `calibration_test` with the same channels (equal by construction, to
    rounding; no score sits on a bin edge). The replicates use another sampler, so the interval and p-value agree
    only in distribution: here within their Monte Carlo spread."""
    rng = np.random.default_rng(4)
    n = 4000
    s = rng.beta(2, 3, n)
    s = s[np.abs(s * 15 - np.round(s * 15)) > 1e-6]
    y = (rng.random(s.size) < np.clip(s**0.8 + 0.03, 0, 1)).astype(int)
    fpr, fnr = np.array([0.10, 0.05, 0.25]), np.array([0.20, 0.10, 0.15])
    a = np.where(y[:, None] == 1, rng.random((s.size, 3)) > fnr, rng.random((s.size, 3)) < fpr).astype(float)
    chans = list(zip(fpr, fnr, strict=True))
    binary = calibration_test(s, a, chans, n_boot=300, seed=3)
    multi = calibration_test_multiclass(
        np.stack([1 - s, s], axis=1), a, chans, kind="classwise", weights="iv", n_boot=300, seed=3
    )
    assert multi.nc_ece == pytest.approx(binary.nc_ece, abs=1e-12)
    one = multi.bins.filter(multi.bins["class"] == 1)
    np.testing.assert_array_equal(one["bin"].to_numpy(), binary.bins["bin"].to_numpy())
    np.testing.assert_allclose(one["moment"].to_numpy(), binary.bins["moment"].to_numpy(), rtol=0, atol=1e-12)
    assert multi.channels == binary.channels and multi.prevalence == pytest.approx(binary.prevalence, abs=1e-12)
    for field in ("ci_low", "ci_high", "null_q95"):
        assert getattr(multi, field) == pytest.approx(getattr(binary, field), rel=0.25)


def test_fixed_channels_give_a_bootstrap_that_reproduces_the_point_value():
    """The sample itself (every item once) is a legal bootstrap draw: its statistic equals the plug-in."""
    from noisycal_platform.calibration.multiclass import inference as mc

    p, a = _sim(1500, 2, True)
    for kind in ("top_label", "classwise"):
        for rule in ("iv", "mvu"):
            lay = mc._Layout(p, mc.class_codes(a, C), kind, 15)
            ref = nc_ece_multiclass(p, a, T, kind=kind, weights=rule)
            ev = mc._Evaluator(lay, rule, T, ref.prevalence, ref.weights, False, 0.05, p)
            cells = np.bincount((lay.slot + lay.key[:, None]).ravel(), minlength=lay.n_cells)
            assert cells[np.setdiff1d(np.arange(lay.n_cells), lay.cols)].sum() == 0  # only reachable cells occupied
            scores = np.bincount(lay.sslot.ravel(), weights=lay.score.ravel(), minlength=lay.n_scells)
            counts_p = np.bincount(lay.key, minlength=lay.n_pat)
            value = ev(cells[lay.cols][None].astype(float), scores[None], counts_p[None])[0]
            assert value[0] == pytest.approx(ref.value, rel=1e-9), (kind, rule)


def test_null_draw_kernel_equals_searchsorted_and_bincount():
    """The compiled null draw counts, per replicate, what the numpy form does with whole arrays: class
    y = #{c : u ≥ F_i(c)}, entry = searchsorted(table, q + v, "right") clipped to row q, one count per row g in
    cell slot[i, g] + key[entry]; exactly (integer counts), with guide tables of 1, 16 and 1,024 buckets. Rows
    with zero-probability patterns (repeated CDF values), uniforms equal to table offsets, two and five classes,
    one and three rows per item; the cells written through a permuted column map, and one pattern count per item."""
    from noisycal_platform.calibration.multiclass._draw_kernel import null_columns

    rng = np.random.default_rng(8)
    for c, n_rows, n_masks in ((2, 1, 3), (5, 3, 4), (5, 1, 8)):
        n, n_rep, per_row = 400, 7, 9
        rows = []
        for _ in range(n_masks * c):
            pr = rng.dirichlet(np.full(per_row, 0.3))
            pr[rng.random(per_row) < 0.3] = 0.0  # zero-probability patterns: flat CDF steps
            pr[-1] += 1.0 - pr.sum()
            rows.append(np.cumsum(pr))
        table = np.concatenate([q + cdf for q, cdf in enumerate(rows)])
        row_start = per_row * np.arange(n_masks * c)
        row_last = row_start + per_row - 1
        entry_key = rng.integers(0, 50, table.size)
        cum_p = np.cumsum(rng.dirichlet(np.ones(c), n), axis=1)[:, :-1]
        q0 = rng.integers(0, n_masks, n) * c
        n_cells = 50 + 60 * n_rows
        slot = rng.integers(0, 60 * n_rows, (n, n_rows))
        u, v = rng.random((n_rep, n)), rng.random((n_rep, n))
        u[:, :20] = cum_p[:20, 0]  # ties with the class CDF
        v[:, :20] = 0.0  # q + v equal to the row offset
        q = q0 + (u[..., None] >= cum_p).sum(axis=2)
        entry = np.clip(np.searchsorted(table, q + v, side="right"), row_start[q], row_last[q])
        want = np.stack([np.bincount((slot + entry_key[e][:, None]).ravel(), minlength=n_cells) for e in entry])
        want_pats = np.stack([np.bincount(entry_key[e], minlength=50) for e in entry])
        colmap = rng.permutation(n_cells)  # any one-to-one map of cells to columns
        for n_buckets in (1, 16, 1024):  # the guide is only a lower bound: any bucket count gives the same draw
            guide = np.searchsorted(table, np.arange(row_start.size)[:, None] + np.arange(n_buckets) / n_buckets,
                                    side="right")
            got = np.zeros((n_rep, n_cells), np.int32)
            pats = np.zeros((n_rep, 50), np.int32)
            null_columns(u, v, np.ascontiguousarray(cum_p), q0, table, row_start, row_last, guide, entry_key, slot,
                         colmap, got, pats)
            np.testing.assert_array_equal(got[:, colmap], want)
            np.testing.assert_array_equal(pats, want_pats)


def test_unidentified_replicates_are_counted_not_hidden():
    """A weak third annotator and min_gap just under its smallest singular value: refits fall under it."""
    rng = np.random.default_rng(5)
    n = 1500
    p = _true_probs(rng, n)
    y = _draw_classes(rng, p)
    weak = 0.55 * np.eye(C) + 0.45 / C
    t = np.stack([T[0], T[1], weak])
    a = draw_annotations(rng, y, t)
    fit = estimate_confusion(a, C, min_gap=0.05)
    gap = float(fit.singular_values[:, -1].min())
    res = calibration_test_multiclass(p, a, kind="top_label", n_boot=100, min_gap=gap * 0.98, seed=1)
    assert res.n_unidentified_boot + res.n_unidentified_null > 0
    assert np.isfinite(res.ci_low) and np.isfinite(res.p_value)


def test_bad_inputs_are_refused_with_a_clear_error():
    p, a = _sim(300, 3)
    with pytest.raises(ValueError, match="kind"):
        calibration_test_multiclass(p, a, kind="macro")
    with pytest.raises(ValueError, match="n_boot"):
        calibration_test_multiclass(p, a, n_boot=0)
    with pytest.raises(ValueError, match="alpha"):
        calibration_test_multiclass(p, a, alpha=1.5)
    with pytest.raises(ValueError, match="weights"):
        calibration_test_multiclass(p, a, weights="gap")
    with pytest.raises(ValueError, match="not both"):
        calibration_test_multiclass(p, a, T, fitted=known_confusion(T))
    with pytest.raises(TypeError, match="ConfusionFit"):
        calibration_test_multiclass(p, a, fitted=T)
    with pytest.raises(ValueError, match="rows"):
        calibration_test_multiclass(p[:-1], a)
    bad = p.copy()
    bad[7, 0] += 0.1
    with pytest.raises(ValueError, match="row 7"):
        calibration_test_multiclass(bad, a, T)
    with pytest.raises(NotIdentifiableError):
        calibration_test_multiclass(p, a[:, :2])  # two annotators do not identify the confusion matrices


def _runs(n_runs: int, n: int, n_boot: int, kind: str, miscalibrated: bool, known: bool = False, seed0: int = 0):
    return [
        calibration_test_multiclass(
            *_sim(n, seed0 + 1000 * miscalibrated + r, miscalibrated), T if known else None, kind=kind,
            n_boot=n_boot, seed=r,
        )
        for r in range(n_runs)
    ]


def _rates(runs, truth: float = float("nan")) -> np.ndarray:
    """Means over runs of (rejected, debiased value, plug-in value, interval covers ``truth``)."""
    return np.mean([[r.rejected, r.nc_ece_debiased, r.nc_ece, r.ci_low <= truth <= r.ci_high] for r in runs], axis=0)


def test_guarantees_fast_version():
    """Few runs, loose bounds: the direction of every guarantee (the slow tests measure the numbers)."""
    truth = _population("top_label", 300_000)
    reject, debiased, plugin, _ = _rates(_runs(5, 1000, 60, "top_label", False))
    reject_mis, _, _, coverage = _rates(_runs(4, 1500, 60, "top_label", True), truth)
    assert reject <= 2 / 5  # P(≥ 3 of 5 | size 5%) = 0.001
    assert debiased < 0.8 * plugin
    assert coverage >= 2 / 4 and reject_mis == 1.0


@pytest.mark.slow
def test_size_and_debiasing_for_a_calibrated_predictor():
    """400 runs, n = 1,500, confusion matrices by Dawid–Skene refitted in every replicate: the test rejects a
    calibrated predictor in at most 7% of runs, and the mean debiased value is well below the plug-in's."""
    reject, debiased, plugin, _ = _rates(_runs(400, 1500, 100, "top_label", False))
    print({"reject": reject, "debiased": debiased, "plugin": plugin})
    assert reject <= 0.07
    assert debiased < 0.6 * plugin


@pytest.mark.slow
def test_coverage_and_power_for_a_miscalibrated_predictor():
    """400 runs, n = 3,000, p ∝ p_true^1.5, refits in every replicate: the test rejects in at least 95% of runs;
    the interval covers the population value in at least 92% of runs."""
    truth = _population("top_label")
    reject, _, _, coverage = _rates(_runs(400, 3000, 100, "top_label", True), truth)
    print({"truth": truth, "coverage": coverage, "reject": reject})
    assert reject >= 0.95
    # The 92% first asked for (it was lowered to 0.87 while the basic interval covered 0.895; restored with the
    # debiased normal interval, which covered 0.960 on tuning seeds: benchmarks/intervals.md).
    assert coverage >= 0.92


@pytest.mark.slow
def test_coverage_with_known_channels():
    """400 runs, n = 3,000, p ∝ p_true^1.5, top-label, the true confusion matrices held fixed: no refits, and
    the interval covers the population value in at least 92% of runs."""
    truth = _population("top_label")
    runs = _runs(400, 3000, 100, "top_label", True, known=True)
    assert not any(c.channels_refit for c in runs)
    coverage = _rates(runs, truth)[3]
    print({"coverage_known": coverage, "truth": truth})
    # The 92% first asked for (restored: see the test above).
    assert coverage >= 0.92
    # Classwise coverage (≥ 93%) is asserted by the guarantee tier (tests/guarantees/test_multiclass.py).


@pytest.mark.parametrize("kind", ["top_label", "classwise"])
def test_mvu_targets_in_the_test_equal_nc_ece_multiclass_and_keep_the_replicates_paired(kind):
    p, a = _sim(2000, 3, True)
    fit = estimate_confusion(a, C, seed=0)
    res = calibration_test_multiclass(p, a, kind=kind, weights="mvu", n_boot=40)
    assert res.nc_ece == pytest.approx(nc_ece_multiclass(p, a, fit, kind=kind, weights="mvu").value, rel=1e-9)
    assert res.channels_refit and np.isnan(res.weights).all() and res.n_unidentified_boot == 0
    known = calibration_test_multiclass(p, a, T, kind=kind, weights="mvu", n_boot=40)
    assert known.nc_ece == pytest.approx(nc_ece_multiclass(p, a, T, kind=kind, weights="mvu").value, rel=1e-9)
    default = calibration_test_multiclass(p, a, T, kind=kind, n_boot=40)  # classwise "mvu", top-label "iv"
    rule = "mvu" if kind == "classwise" else "iv"
    assert default.nc_ece == pytest.approx(nc_ece_multiclass(p, a, T, kind=kind, weights=rule).value, rel=1e-9)
    assert known.ci_low <= known.nc_ece_debiased <= known.ci_high
    mom = res.bins["moment"].to_numpy()
    assert np.abs(mom).sum() / (C if kind == "classwise" else 1) == pytest.approx(res.nc_ece, rel=1e-9)
