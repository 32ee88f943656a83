"""calibration_test: plug-in agrees with nc_ece, refits agree with Dawid–Skene, and the seed's guarantees hold by
simulation with known truth (heavy versions marked slow)."""

import functools

import numpy as np
import pytest
from scipy import stats
from scipy.special import expit

from noisycal_platform.calibration import dawid_skene, estimate_channels, nc_ece, score_group_em
from noisycal_platform.calibration.channels._base import annotation_codes, pattern_counts
from noisycal_platform.calibration.inference import (
    batched_em,
    bootstrap_p_value,
    calibration_test,
    debiased_abs_sum,
    debiased_normal_interval,
    folded_normal_mean,
)
from noisycal_platform.calibration.weights import aggregation_weights

FPR = np.array([0.10, 0.05, 0.25])
FNR = np.array([0.20, 0.10, 0.15])
KNOWN = list(zip(FPR, FNR, strict=True))


def _sim(n, seed, miscalibrated=False, fpr=FPR, fnr=FNR):
    rng = np.random.default_rng(seed)
    s = rng.beta(2, 3, n)
    eta = np.minimum(s**0.8 + 0.03, 1.0) if miscalibrated else s
    y = rng.random(n) < eta
    a = (rng.random((n, len(fpr))) < np.where(y[:, None], 1 - fnr, fpr)).astype(float)
    return s, a


@functools.cache
def _population_nc_ece(n_bins=15):
    """Σ_k |∫_{bin k} (η(s) − s) f(s) ds| for s ~ Beta(2, 3), η = min(s^0.8 + 0.03, 1), by quadrature."""
    from scipy import integrate

    def g(x):
        return (min(x**0.8 + 0.03, 1.0) - x) * stats.beta.pdf(x, 2, 3)

    kink = 0.97**1.25  # where s^0.8 + 0.03 reaches 1
    total = 0.0
    for k in range(n_bins):
        lo, hi = k / n_bins, (k + 1) / n_bins
        points = [kink] if lo < kink < hi else None
        total += abs(integrate.quad(g, lo, hi, points=points, epsabs=1e-13)[0])
    return total


@pytest.mark.slow
def test_population_truth_matches_ten_million_draws():
    s = np.random.default_rng(12345).beta(2, 3, 10**7)
    b = np.minimum(np.floor(s * 15), 14).astype(np.int64)
    mc = np.abs(np.bincount(b, weights=np.minimum(s**0.8 + 0.03, 1.0) - s, minlength=15)).sum() / s.size
    assert mc == pytest.approx(_population_nc_ece(), abs=3e-4)  # MC s.e. of the sum ≈ 1e-4


def test_plugin_value_is_nc_ece_with_the_fitted_channels():
    s, a = _sim(800, 1)
    res = calibration_test(s, a, n_boot=50)
    fit = estimate_channels(a, scores=s)
    w = aggregation_weights(fit.channels, fit.prevalence, "iv")
    assert res.nc_ece == pytest.approx(nc_ece(s, a, fit.channels, weights=w).value, rel=1e-9)
    assert res.channels_refit
    known = calibration_test(s, a, KNOWN, n_boot=50)
    assert known.nc_ece == pytest.approx(nc_ece(s, a, KNOWN).value, rel=1e-9)
    assert not known.channels_refit
    assert known.bins["bin"].to_list() == nc_ece(s, a, KNOWN).bins["bin"].to_list()


def test_batched_em_matches_dawid_skene_on_each_table():
    tables = []
    fits = []
    for seed in (3, 4):
        _, a = _sim(2000, seed)
        pats, _, counts = pattern_counts(annotation_codes(a))
        fits.append(dawid_skene(a))
        tables.append((pats, counts))
    pats = tables[0][0]
    assert all(np.array_equal(p, pats) for p, _ in tables)  # all 27 complete patterns occur at n = 2000
    x = np.stack([c for _, c in tables])[:, None, :]
    prior, fpr, fnr, done = batched_em(x, pats, np.full((2, 1), 0.5), np.full((2, 3), 0.2), np.full((2, 3), 0.2))
    assert done.all()
    for r, f in enumerate(fits):
        np.testing.assert_allclose(fpr[r], f.fpr, atol=1e-6)
        np.testing.assert_allclose(fnr[r], f.fnr, atol=1e-6)
        assert prior[r, 0] == pytest.approx(f.prevalence, abs=1e-6)


def _random_em_tables(rng: np.random.Generator, r: int):
    """Pattern counts around a latent-class model (π_g per group, channels (a, b), each answer missing w.p. 0.2),
    two or three annotators, 1–4 groups, and random starts."""
    k, g = int(rng.integers(2, 4)), int(rng.integers(1, 5))
    pats = np.stack(np.meshgrid(*[np.arange(3)] * k, indexing="ij"), axis=-1).reshape(-1, k)[:-1].astype(np.int8)
    pi, a, b = rng.uniform(0.1, 0.9, g), rng.uniform(0.02, 0.3, k), rng.uniform(0.02, 0.3, k)
    seen, one = pats != 2, pats == 1
    p_pos = np.where(seen, np.where(one, 1 - b, b) * 0.8, 0.2).prod(axis=1)
    p_neg = np.where(seen, np.where(one, a, 1 - a) * 0.8, 0.2).prod(axis=1)
    rate = rng.uniform(200, 2000) * (pi[:, None] * p_pos + (1 - pi[:, None]) * p_neg)  # (G, P)
    counts = rng.poisson(rate, (r, g, pats.shape[0])).astype(float)
    counts[:, :, 0] += 1.0  # every group has an item
    starts = (rng.uniform(0.1, 0.9, (r, g)), rng.uniform(0.01, 0.4, (r, k)), rng.uniform(0.01, 0.4, (r, k)))
    return counts, pats, starts


def _reference_em_step(counts, obs1, obs0, prior, fpr, fnr):
    """One EM step on every table at once, written from the formulas (Hanada and Futami 2026 §F.1.1–F.1.2) in
    numpy: log-likelihoods of each pattern under Y = 1 and Y = 0, posterior by `scipy.special.expit`,
    counts-weighted M-step, clip to [ε, 1 − ε]."""
    eps = 1e-10
    obs = obs1 + obs0
    l1 = np.log1p(-fnr) @ obs1.T + np.log(fnr) @ obs0.T  # (R, P)
    l0 = np.log(fpr) @ obs1.T + np.log1p(-fpr) @ obs0.T
    w1 = counts * expit((l1 - l0)[:, None, :] + np.log(prior / (1 - prior))[:, :, None])
    w0 = counts - w1
    prior = np.clip(w1.sum(axis=2) / counts.sum(axis=2), eps, 1 - eps)
    w1p, w0p = w1.sum(axis=1), w0.sum(axis=1)
    fpr = np.clip((w0p @ obs1) / (w0p @ obs), eps, 1 - eps)
    fnr = np.clip(1.0 - (w1p @ obs1) / (w1p @ obs), eps, 1 - eps)
    return prior, fpr, fnr


def _exchange(prior, fpr, fnr):
    """The label exchange (π, a, b) → (1 − π, 1 − b, 1 − a) of the tables with Σ_j (1 − a_j − b_j) < 0."""
    flip = (1.0 - fpr - fnr).sum(axis=1) < 0
    prior[flip], fpr[flip], fnr[flip] = 1.0 - prior[flip], 1.0 - fnr[flip], 1.0 - fpr[flip]
    return prior, fpr, fnr


def _reference_em_steps(counts, pats, prior, fpr, fnr, n_steps):
    """``n_steps`` reference steps (`_reference_em_step`) from the clipped starts, then the label exchange."""
    obs1, obs0 = (pats == 1).astype(float), (pats == 0).astype(float)
    params = tuple(np.clip(np.array(x, float), 1e-10, 1 - 1e-10) for x in (prior, fpr, fnr))
    for _ in range(n_steps):
        params = _reference_em_step(counts, obs1, obs0, *params)
    return _exchange(*params)


def test_batched_em_fixed_steps_equal_the_formulas():
    """With ``tol`` = 0 every table takes exactly ``max_iter`` steps: 1, 2, 7 and 60 steps on random tables equal
    the numpy reference above at relative 1e-9 (absolute 1e-15 for parameters pushed towards ε; the kernel sums in
    pattern order, the reference through BLAS, so the last bits differ), and no table reports convergence."""
    rng = np.random.default_rng(2325)
    for _ in range(20):
        counts, pats, starts = _random_em_tables(rng, int(rng.integers(1, 30)))
        for n_steps in (1, 2, 7, 60):
            *got, done = batched_em(counts, pats, *starts, max_iter=n_steps, tol=0.0)
            want = _reference_em_steps(counts, pats, *starts, n_steps)
            for x, y in zip(got, want, strict=True):
                np.testing.assert_allclose(x, y, rtol=1e-9, atol=1e-15)
            assert not done.any()


def test_batched_em_table_result_does_not_depend_on_the_batch():
    """Each table stops on its own test, so its result is the one its own one-table call gives, bit for bit (the
    same sequential arithmetic), whichever tables share the call; tolerances and limits that stop some tables
    early and some at the limit."""
    rng = np.random.default_rng(2324)
    n_limited = n_converged = 0
    for _ in range(30):
        r = int(rng.integers(2, 60))
        counts, pats, starts = _random_em_tables(rng, r)
        kw = {"max_iter": int(rng.choice([3, 500, 500])), "tol": float(rng.choice([1e-8, 1e-5]))}
        got = batched_em(counts, pats, *starts, **kw)
        for row in rng.choice(r, size=min(r, 5), replace=False):
            want = batched_em(counts[row : row + 1], pats, *(x[row : row + 1] for x in starts), **kw)
            for x, y in zip(got, want, strict=True):
                np.testing.assert_array_equal(x[row : row + 1], y)
            n_converged += bool(want[3][0])
            n_limited += not want[3][0]
    assert n_converged >= 40 and n_limited >= 20


def test_batched_em_stops_each_table_at_its_own_test():
    """Each table stops at the first step whose largest parameter change is below ``tol``: its result equals the
    reference run for exactly that many steps (the reference's first step with a change below tol)."""
    rng = np.random.default_rng(2326)
    counts, pats, starts = _random_em_tables(rng, 12)
    tol = 1e-7
    *got, done = batched_em(counts, pats, *starts, max_iter=500, tol=tol)
    assert done.all()
    obs1, obs0 = (pats == 1).astype(float), (pats == 0).astype(float)
    for row in range(12):
        params = tuple(np.clip(x[row : row + 1], 1e-10, 1 - 1e-10) for x in starts)
        for _ in range(500):
            new = _reference_em_step(counts[row : row + 1], obs1, obs0, *params)
            change = max(float(np.abs(x - y).max()) for x, y in zip(new, params, strict=True))
            params = new
            if change < tol:
                break
        want = _exchange(*(x.copy() for x in params))
        for x, y in zip(got, want, strict=True):
            np.testing.assert_allclose(x[row : row + 1], y, rtol=1e-9, atol=1e-15)


def test_folded_normal_mean_is_scipy_foldnorm_mean():
    mu, sd = np.array([0.0, 0.3, -1.2, 2.0]), np.array([1.0, 0.5, 0.7, 0.1])
    expected = [stats.foldnorm(abs(m) / s, scale=s).mean() for m, s in zip(mu, sd, strict=True)]
    np.testing.assert_allclose(folded_normal_mean(mu, sd), expected, rtol=1e-9)


def test_debiased_abs_sum_bias_at_zero_is_the_closed_form():
    """m̂ ~ N(0, σ²): E[2|m̂| − E_N(m̂,σ²)|R|] = 2σ·sqrt(2/π) − σ·2/sqrt(π) = 0.4674·σ (E over Z of F(Z) = sqrt2·E|Z|)."""
    rng = np.random.default_rng(0)
    sigma = np.array([0.01, 0.02, 0.005])
    m = rng.standard_normal((200_000, 3)) * sigma
    per_bin = 2 * np.abs(m) - folded_normal_mean(m, sigma)
    expected = (2 * np.sqrt(2 / np.pi) - 2 / np.sqrt(np.pi)) * sigma
    np.testing.assert_allclose(per_bin.mean(axis=0), expected, rtol=0.02)
    assert debiased_abs_sum(np.array([0.0, 0.0]), np.array([1.0, 1.0])) == 0.0  # negative sum clipped
    assert debiased_abs_sum(np.array([0.5, -0.4]), np.zeros(2)) == pytest.approx(0.9, rel=1e-9)


def test_debiased_bias_and_cost_away_from_zero_by_quadrature():
    """m̂ ~ N(σ, σ²): bias −0.066σ (plug-in +0.167σ); m̂ ~ N(2σ, σ²): a larger variance than the plug-in's (the
    cost the docstring states), both by quadrature over the normal density."""
    from scipy import integrate

    def moments(mu, f):
        pdf = stats.norm(mu, 1.0).pdf
        m1 = integrate.quad(lambda x: f(x) * pdf(x), -12, 12, points=[0.0])[0]
        m2 = integrate.quad(lambda x: f(x) ** 2 * pdf(x), -12, 12, points=[0.0])[0]
        return m1 - abs(mu), m2 - m1**2

    def kumar(x):
        return 2 * abs(x) - float(folded_normal_mean(x, 1.0))

    assert moments(1.0, kumar)[0] == pytest.approx(-0.066, abs=5e-4)
    assert moments(1.0, abs)[0] == pytest.approx(0.167, abs=5e-4)
    assert moments(2.0, kumar)[1] > 1.02 * moments(2.0, abs)[1]


def test_debiased_value_uses_score_group_channels():
    """K = 3, channels estimated: the debiased value's moments are those of `nc_ece` with shared-channel score-group
    EM channels (5 quantile groups, edges rounded to the fine grid 1/60), and the value is `debiased_abs_sum` of the
    reported moments and s.e.; with known channels the moments are the plug-in's own."""
    s, a = _sim(1500, 7, True)
    res = calibration_test(s, a, n_boot=100)
    edges = np.unique(np.clip(np.round(np.quantile(s, [0.2, 0.4, 0.6, 0.8]) * 60), 1, 59)) / 60
    fit = score_group_em(a, np.searchsorted(edges, s, side="right"))
    ref = nc_ece(s, a, fit.channels, weights=aggregation_weights(fit.channels, fit.prevalence, "iv")).bins
    assert res.method == "dawid_skene" and ref["bin"].to_list() == res.bins["bin"].to_list()
    expected = ref["n"].to_numpy() / ref["n"].sum() * ref["residual"].to_numpy()
    np.testing.assert_allclose(res.bins["moment"].to_numpy(), expected, rtol=1e-9, atol=1e-15)
    se = res.bins["moment_se"].to_numpy()
    assert np.all(se > 0)
    assert res.nc_ece_debiased == pytest.approx(float(debiased_abs_sum(expected, se**2)), rel=1e-9)
    known = calibration_test(s, a, KNOWN, n_boot=100)
    plug = nc_ece(s, a, KNOWN).bins
    own = plug["n"].to_numpy() / plug["n"].sum() * plug["residual"].to_numpy()
    np.testing.assert_allclose(known.bins["moment"].to_numpy(), own, rtol=1e-9, atol=1e-15)
    se_known = known.bins["moment_se"].to_numpy()
    assert known.nc_ece_debiased == pytest.approx(float(debiased_abs_sum(own, se_known**2)), rel=1e-9)


def test_debiased_normal_interval_and_p_value_definitions():
    """D(m̂) ± z·sd_b D(m*_b) with D(m) = max(Σ_k 2|m_k| − E|N(m_k, σ̂_k²)|, 0), σ̂_k² the replicates' variance;
    E|N(μ, σ²)| from scipy's folded normal, not from the code under test."""
    rng = np.random.default_rng(3)
    m_hat = np.array([0.03, -0.001, 0.0, 0.012])
    reps = m_hat + rng.normal(0.0, [0.004, 0.002, 0.001, 0.003], size=(400, 4))
    var = reps.var(axis=0, ddof=1)

    def d(m):
        folded = [stats.foldnorm(abs(mk) / np.sqrt(v), scale=np.sqrt(v)).mean() for mk, v in zip(m, var, strict=True)]
        return max(float(np.sum(2 * np.abs(m) - np.array(folded))), 0.0)

    sd = np.std([d(r) for r in reps], ddof=1)
    est, lo, hi, v_out = debiased_normal_interval(m_hat, reps, 0.95)
    assert v_out == pytest.approx(var, rel=1e-9)
    assert est == pytest.approx(d(m_hat), rel=1e-9)
    assert lo == pytest.approx(d(m_hat) - 1.959963984540054 * sd, rel=1e-9)
    assert hi == pytest.approx(d(m_hat) + 1.959963984540054 * sd, rel=1e-9)
    assert np.isnan(debiased_normal_interval(m_hat, reps[:1])[1])  # one replicate: no spread, no interval
    reps_p = np.arange(1, 1001) / 1000.0
    assert bootstrap_p_value(0.9905, reps_p) == pytest.approx((1 + 10) / 1001, rel=1e-9)
    assert bootstrap_p_value(0.5, np.array([np.nan, 0.1, 0.7])) == pytest.approx(2 / 3, rel=1e-9)


def test_unidentified_replicates_are_counted_not_hidden():
    """A weak annotator (gap 0.25) with min_gap 0.2: some refits fall under the gap and are counted."""
    s, a = _sim(1500, 11, fpr=np.array([0.1, 0.1, 0.375]), fnr=np.array([0.1, 0.1, 0.375]))
    res = calibration_test(s, a, n_boot=200, min_gap=0.2, seed=2)
    assert min(c.gap for c in res.channels) > 0.2
    assert res.n_unidentified_boot + res.n_unidentified_null > 0
    assert np.isfinite(res.ci_low) and np.isfinite(res.p_value)


def _guarantee_runs(n_runs, n_boot, seed0=0):
    calibrated = [calibration_test(*_sim(500, 100 + r), n_boot=n_boot, seed=seed0 + r) for r in range(n_runs)]
    mis = [calibration_test(*_sim(3000, 5000 + r, True), n_boot=n_boot, seed=seed0 + r) for r in range(n_runs)]
    return calibrated, mis


def _summary(calibrated, mis, truth):
    return {
        "reject_calibrated": np.mean([c.rejected for c in calibrated]),
        "debiased_calibrated": np.mean([c.nc_ece_debiased for c in calibrated]),
        "plugin_calibrated": np.mean([c.nc_ece for c in calibrated]),
        "coverage": np.mean([c.ci_low <= truth <= c.ci_high for c in mis]),
        "reject_mis": np.mean([c.rejected for c in mis]),
        "mae_debiased": np.mean([abs(c.nc_ece_debiased - truth) for c in mis]),
        "mae_plugin": np.mean([abs(c.nc_ece - truth) for c in mis]),
    }


def test_guarantees_fast_version():
    """Few replicates, loose bounds: the direction of every guarantee (the slow test checks the numbers)."""
    truth = _population_nc_ece()
    calibrated, mis = _guarantee_runs(6, 80)
    m = _summary(calibrated, mis, truth)
    assert m["reject_calibrated"] <= 0.25
    assert m["debiased_calibrated"] < 0.75 * m["plugin_calibrated"]
    assert m["coverage"] >= 0.75 and m["reject_mis"] == 1.0


@pytest.mark.slow
def test_guarantees_with_estimated_channels():
    """Hanada and Futami 2026 setting, channels by Dawid–Skene refitted in every replicate, 400 runs each."""
    truth = _population_nc_ece()
    calibrated, mis = _guarantee_runs(400, 500)
    m = _summary(calibrated, mis, truth)
    print(m)
    assert m["reject_calibrated"] <= 0.07
    assert m["debiased_calibrated"] <= 0.045
    assert m["coverage"] >= 0.92
    assert m["reject_mis"] >= 0.95
    diff = [abs(c.nc_ece_debiased - truth) - abs(c.nc_ece - truth) for c in mis]
    print({"mae_paired_diff": np.mean(diff), "se": np.std(diff, ddof=1) / np.sqrt(len(diff))})
    assert m["mae_debiased"] < m["mae_plugin"]


@pytest.mark.slow
def test_coverage_with_known_channels():
    truth = _population_nc_ece()
    runs = [calibration_test(*_sim(3000, 9000 + r, True), KNOWN, n_boot=500, seed=r) for r in range(400)]
    assert not any(c.channels_refit for c in runs)
    coverage = np.mean([c.ci_low <= truth <= c.ci_high for c in runs])
    print({"coverage_known": coverage})
    assert coverage >= 0.92


def test_two_annotators_refit_with_score_groups():
    s, a = _sim(3000, 21, fpr=FPR[:2], fnr=FNR[:2])
    res = calibration_test(s, a, n_boot=100)
    assert res.method == "score_group_em" and res.channels_refit
    assert 0 <= res.ci_low <= res.ci_high and 0 < res.p_value <= 1
    fit = estimate_channels(a, scores=s)
    w = aggregation_weights(fit.channels, fit.prevalence, "iv")
    assert res.nc_ece == pytest.approx(nc_ece(s, a, fit.channels, weights=w).value, rel=1e-9)


def test_fitted_and_known_channels_are_exclusive():
    s, a = _sim(300, 2)
    with pytest.raises(ValueError, match="either channels"):
        calibration_test(s, a, KNOWN, fitted=estimate_channels(a), n_boot=10)
