"""Coverage and width of candidate NC-ECE intervals on the same bootstrap replicates (issue 23 item 1).

Settings (the guarantee tier's, tests/guarantees/_runs.py):
- ``binary``: n = 3,000, P(Y=1 | s) = min(s^0.8 + 0.03, 1), three annotators, Dawid–Skene channels refitted in
  every bootstrap replicate (tests/unit/calibration/test_inference.py ``_sim``), n_boot 200;
- ``top_label`` / ``classwise``: 5 classes, 3 annotators, p ∝ p_true^1.5, n = 3,000, known confusion matrices
  (tests/unit/calibration/multiclass/test_inference.py ``_sim``), n_boot 100; ``--estimated`` refits them.

The shipped tests run unchanged; their replicate arrays are recorded by wrapping the replicate evaluation, and
every candidate is computed from the same record, so the comparison is paired. The shipped interval is the last
row (binary: the debiased normal interval of the score-group moments; multi-class: the "debiased normal" row);
`ci_low`/`ci_high` of the result equal it (asserted in every run).

Seeds (TUNING; disjoint from the guarantee tier's 23,000,000–23,069,999 and the unit tests'): binary data and
bootstrap seed 700,000 + r; multi-class 710,000 + r. The mvu targets (2026-12-06 evening): tuning 27,000,000 + r,
held-out 27,500,000 + r.

Candidates (θ̂ plug-in, θ*_b bootstrap replicates, q_p their p-quantile, s their s.d., z = Φ⁻¹(0.975); m̂ the
per-bin moments with bootstrap replicates m*_b and variances σ̂²; D(m) = debiased_abs_sum(m, σ̂²)):
- basic:      [2θ̂ − q_.975, 2θ̂ − q_.025]  (Davison & Hinkley 1997, eq. 5.6)
- percentile: [q_.025, q_.975]
- normal:     θ̂ ± z·s
- debiased normal:  D(m̂) ± z·sd_b D(m*_b)
- debiased basic:   [2D(m̂) − q_.975(D(m*)), 2D(m̂) − q_.025(D(m*))]
- debiased centre, plug-in s.d.: D(m̂) ± z·s
- debiased pivot:   [D(m̂) − (q_.975(D(m*)) − θ̂), D(m̂) − (q_.025(D(m*)) − θ̂)]: the basic interval of D, whose
  bootstrap-world target is the plug-in θ̂ = Σ|m̂_k| (not D(m̂))
- partly debiased normal, λ: D_λ(m̂) ± z·sd_b D_λ(m*_b), D_λ(m) = max(Σ_k [(1 + λ)|m_k| − λ·E_{N(m_k, σ̂_k²)}|R|], 0)
  (λ = 1 is D, λ = 0 the plug-in): a smaller slope near zero (1 + λ), so a narrower interval, for more bias
  left at zero ((0.798 − 0.330λ)·σ_k per bin); rows for λ = 0.6, 0.8, 0.85, 0.9, 0.95
- debiased centre, linear s.d.: D(m̂) ± z·sd_b(Σ_k sign(m̂_k)·m*_bk): the asymptotic-normal interval of Sun,
  Chaudhari, Barnett & Dobriban (2024, arXiv 2408.08998) carried from the ℓ2- to the ℓ1-ECE (delta method: the
  derivative of Σ|m_k| is sign(m_k)), with the moments' covariance from the replicates (channel refits included)
- studentised: [D(m̂) − t*_.975·se(m̂), D(m̂) − t*_.025·se(m̂)], t*_b = (D(m*_b) − θ̂)/se(m*_b), se(m)² =
  Σ_k Var_{R~N(m_k, σ̂_k²)}[2|R| − E_{N(R, σ̂_k²)}|R'|] (per-bin Gaussian variance of D, Gauss–Hermite; no inner
  resampling, so the channels' refits enter only through t*)
- shrunk world: D(m̂) ± z·sd_b D(m̃ + m*_b − m̂), m̃_k = sign(m̂_k)·max(D_k(m̂_k), 0): the bootstrap deviations
  moved to a world whose moments have the debiased sizes (the bootstrap world centred at m̂ overstates D's
  variance in bins near zero and understates it at 1–3 σ_k; `model` prints both)
- empirical Bayes: Σ_k σ̂_k·E_Ĝ[|τ| | m̂_k/σ̂_k] ± z·(its bootstrap s.d., Ĝ refitted per replicate), Ĝ the
  Kiefer–Wolfowitz NPMLE of the standardised moments on a grid (Jiang & Zhang 2009, Ann. Statist. 37; 200 EM
  steps); Σ of posterior means is unbiased in the compound setting when Ĝ is the moments' empirical law

- mvu targets (``--mvu``; multi-class): the same test rerun on the same data and seed with ``weights="mvu"``
  (`corrected.mvu_pattern_targets`: per score cell, the minimum-variance unbiased function of the whole answer
  pattern instead of the inverse-variance average of per-annotator corrected labels; a lower-variance estimator of
  the same NC-ECE). Its basic and debiased normal intervals; width / basic divides by the basic interval of the
  shipped ("iv") run, so the ratio is against today's basic interval on the same data. The bootstrap draws do not
  depend on the targets, so the two runs resample the same items.

``--no-null`` (multi-class): the null side (p-value only) is not drawn; the interval is unchanged (asserted).

Below the table: each debiased centre D_λ's bias and empirical s.d. over the runs against its mean bootstrap
s.d., the coverage if every run used that mean s.d. (the most a noise-free variance estimate can give), and the
width an interval with the empirical s.d. would have ("exact-s.d. width").

``model`` (no simulation): one bin, m̂ ~ N(μ, 1): the bias and variance of D_λ, and the variance the bootstrap
world (centred at m̂) and the shrunk world assign to D, against μ; then the best of the two-parameter family
(1 + a)|x| − a·E_{N(x, κ²)}|R| for variance + w·bias² averaged over μ ∈ [0, 3.5].

Usage: nice -n 10 python benchmarks/bench_interval_coverage.py SETTING [n_runs [first_seed]] [--estimated] [--eb]
       [--mvu] [--no-null]
(--eb: compute the empirical-Bayes row, NaN without it; it costs more than all other rows together)
       nice -n 10 python benchmarks/bench_interval_coverage.py model
(first_seed 23000000 / 23020000 re-measures on the guarantee tier's held-out seeds, after the choice.)
"""

from __future__ import annotations

import sys
import time

import numpy as np
from scipy.stats import norm

from noisycal_platform.calibration import calibration_test
from noisycal_platform.calibration.inference import bins as bins_mod
from noisycal_platform.calibration.inference import refits
from noisycal_platform.calibration.multiclass import calibration_test_multiclass
from noisycal_platform.calibration.multiclass import inference as mc_inference
from tests.guarantees import _runs
from tests.unit.calibration import test_inference as bin_sim
from tests.unit.calibration.multiclass import test_inference as mc_sim

Z = norm.ppf(0.975)
PARTIAL = (0.6, 0.8, 0.85, 0.9, 0.95)
NAMES = ("basic", "percentile", "normal", "debiased normal", "debiased basic", "debiased centre, plug-in s.d.",
         "debiased pivot", *(f"partly debiased normal, λ = {lam}" for lam in PARTIAL),
         "debiased centre, linear (delta-method) s.d.", "studentised (t* about θ̂, per-bin Gaussian se)",
         "debiased normal, shrunk bootstrap world", "empirical Bayes (NPMLE), normal",
         "shipped: debiased normal (binary: with score-group moments)")
SCORE_GROUP = len(NAMES) - 1  # the shipped row
DIAG_LAMS = (*PARTIAL, 1.0)  # diagnostic rows after NAMES: (D_λ(m̂), sd_b D_λ(m*)) per λ
_GH_Z, _GH_W = np.polynomial.hermite_e.hermegauss(60)
_GH_W = _GH_W / _GH_W.sum()
_NPMLE_GRID = np.linspace(-8.0, 8.0, 161)
WITH_EB = "--eb" in sys.argv
WITH_MVU = "--mvu" in sys.argv
MVU_NAMES = ("mvu targets: basic", "mvu targets: debiased normal")


def partly_debiased(moments: np.ndarray, var: np.ndarray, lam: float) -> np.ndarray:
    """D_λ over the last axis: max(Σ_k [(1 + λ)|m_k| − λ·E_{N(m_k, σ̂_k²)}|R|], 0)."""
    folded = bins_mod.folded_normal_mean(moments, np.sqrt(var))
    return np.maximum(((1 + lam) * np.abs(moments) - lam * folded).sum(axis=-1), 0.0)


def per_bin_variance(moments: np.ndarray, sd: np.ndarray) -> np.ndarray:
    """Var_{R~N(m_k, σ_k²)}[2|R| − E_{N(R, σ_k²)}|R'|] per bin (Gauss–Hermite, 60 nodes)."""
    x = moments[..., None] + sd[..., None] * _GH_Z
    g = 2 * np.abs(x) - bins_mod.folded_normal_mean(x, sd[..., None])
    mean = (g * _GH_W).sum(-1)
    return ((g - mean[..., None]) ** 2 * _GH_W).sum(-1)


def npmle_abs_sum(t: np.ndarray, scale: np.ndarray, weights0: np.ndarray | None = None, n_iter: int = 200):
    """Σ_k scale_k·E_Ĝ[|τ| | t_k] over the last axis and Ĝ (grid weights): the Kiefer–Wolfowitz NPMLE of t_k ~
    N(τ_k, 1) on `_NPMLE_GRID` by EM (vectorised over leading axes), warm-started at ``weights0``."""
    lik = np.exp(-0.5 * (t[..., :, None] - _NPMLE_GRID) ** 2)
    w = np.full((*t.shape[:-1], _NPMLE_GRID.size), 1.0 / _NPMLE_GRID.size) if weights0 is None else weights0.copy()
    for _ in range(n_iter):  # loop over EM steps, each vectorised over replicates and bins
        post = lik * w[..., None, :]
        post /= post.sum(-1, keepdims=True)
        w = post.mean(-2)
    post = lik * w[..., None, :]
    post /= post.sum(-1, keepdims=True)
    return ((post * np.abs(_NPMLE_GRID)).sum(-1) * scale).sum(-1), w


_RECORD: dict = {}


def candidates(value: float, b_val: np.ndarray, moments: np.ndarray, b_mom: np.ndarray) -> np.ndarray:
    """(len(NAMES) + len(DIAG_LAMS), 2): the candidates' bounds from one run's record, then (D_λ(m̂), sd_b D_λ(m*))
    per λ in DIAG_LAMS."""
    ok = np.isfinite(b_val)
    b_val, b_mom = b_val[ok], b_mom[ok]
    lo_q, hi_q = np.quantile(b_val, [0.025, 0.975])
    sd = b_val.std(ddof=1)
    var = np.nan_to_num(np.nanvar(b_mom, axis=0, ddof=1))
    d_hat = float(bins_mod.debiased_abs_sum(moments, var))
    d_rep = bins_mod.debiased_abs_sum(np.nan_to_num(b_mom), var)
    d_lo, d_hi = np.quantile(d_rep, [0.025, 0.975])
    d_sd = d_rep.std(ddof=1)
    out = [
        (2 * value - hi_q, 2 * value - lo_q),
        (lo_q, hi_q),
        (value - Z * sd, value + Z * sd),
        (d_hat - Z * d_sd, d_hat + Z * d_sd),
        (2 * d_hat - d_hi, 2 * d_hat - d_lo),
        (d_hat - Z * sd, d_hat + Z * sd),
        (d_hat + value - d_hi, d_hat + value - d_lo),
    ]
    diag = []
    for lam in DIAG_LAMS:
        centre = float(partly_debiased(moments, var, lam))
        sd_lam = partly_debiased(np.nan_to_num(b_mom), var, lam).std(ddof=1)
        diag.append((centre, sd_lam))
        if lam in PARTIAL:
            out.append((centre - Z * sd_lam, centre + Z * sd_lam))
    rep = np.nan_to_num(b_mom)
    lin_sd = (np.sign(moments) * rep).sum(axis=1).std(ddof=1)
    out.append((d_hat - Z * lin_sd, d_hat + Z * lin_sd))
    sig = np.sqrt(var)
    se = np.sqrt(per_bin_variance(moments, sig).sum())
    se_b = np.sqrt(per_bin_variance(rep, np.broadcast_to(sig, rep.shape)).sum(axis=1))
    t_lo, t_hi = np.quantile((d_rep - value) / se_b, [0.025, 0.975])
    out.append((d_hat - t_hi * se, d_hat - t_lo * se))
    shrunk = np.sign(moments) * np.maximum(2 * np.abs(moments) - bins_mod.folded_normal_mean(moments, sig), 0.0)
    w_sd = bins_mod.debiased_abs_sum(shrunk + rep - moments, var).std(ddof=1)
    out.append((d_hat - Z * w_sd, d_hat + Z * w_sd))
    if WITH_EB:
        keep = sig > 0
        eb, g_hat = npmle_abs_sum(moments[keep] / sig[keep], sig[keep])
        eb_rep, _ = npmle_abs_sum(rep[:, keep] / sig[keep], sig[keep],
                                  np.broadcast_to(g_hat, (rep.shape[0], g_hat.size)))
        eb_sd = eb_rep.std(ddof=1)
        out.append((eb - Z * eb_sd, eb + Z * eb_sd))
    else:  # the EM per replicate costs more than the rest together: only with --eb
        out.append((np.nan, np.nan))
    out.append(out[3])  # multi-class (binary: replaced in `binary_run`)
    return np.maximum(np.array(out + diag, float), 0.0)


def _install_spies() -> None:
    """Record the binary plug-in's (Dawid–Skene) and score-group bootstrap replicates, and the multi-class
    replicate fields. `calibration_test` evaluates its bootstrap draws once, with the debiased value's refits;
    the plug-in's own refits (the first `_Replicates` it builds) are evaluated here on the same draws."""
    original_init = refits._Replicates.__init__
    original_eval = refits._Replicates.evaluate
    original_fields = mc_inference._replicate_fields

    def init(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        _RECORD.setdefault("plugin_rep", self)

    def evaluate(self, counts, score_sum_bin, cell_ssum):
        out = original_eval(self, counts, score_sum_bin, cell_ssum)
        if cell_ssum is not None:  # the bootstrap side
            plugin = _RECORD["plugin_rep"]
            p_out = out if plugin is self else original_eval(plugin, counts, score_sum_bin, cell_ssum)
            _RECORD["b_val"], _RECORD["b_mom"] = p_out[0], p_out[1]
            if plugin is not self:
                _RECORD["d_mom"], _RECORD["d_ok"] = out[1], out[3]
        return out

    def fields(value, moments, boot, null, alpha):
        _RECORD.update(value=value, moments=moments, b_val=boot[0], b_mom=boot[1])
        return original_fields(value, moments, boot, null, alpha)

    refits._Replicates.__init__ = init
    refits._Replicates.evaluate = evaluate
    mc_inference._replicate_fields = fields
    if "--no-null" in sys.argv:  # multi-class: skip the null side (p-value only; the interval is unchanged)
        original_null, original_side = mc_inference._null_draw, mc_inference._run_side

        def null_draw(*args, **kwargs):
            draw = original_null(*args, **kwargs)
            draw.skip = True
            return draw

        def run_side(draw, ev, lay, n_rep):
            if getattr(draw, "skip", False):
                nan = np.full(n_rep, np.nan)
                return (nan, np.full((n_rep, lay.n_rows * lay.n_bins), np.nan),
                        np.full((n_rep, lay.n_rows, lay.n_bins), np.nan), np.zeros(n_rep, bool))
            return original_side(draw, ev, lay, n_rep)

        mc_inference._null_draw, mc_inference._run_side = null_draw, run_side


def binary_run(seed: int) -> np.ndarray:
    _RECORD.clear()
    res = calibration_test(*bin_sim._sim(3000, seed, True), n_boot=_runs.BINARY_N_BOOT, seed=seed)
    b = res.bins
    moments = np.zeros(res.n_bins)
    # the plug-in moments n_k/N·(ȳ_k − s̄_k) of the Dawid–Skene fit (bins carry the plug-in residuals)
    moments[b["bin"].to_numpy()] = b["n"].to_numpy() / res.n_items * b["residual"].to_numpy()
    rows = candidates(res.nc_ece, _RECORD["b_val"], moments, _RECORD["b_mom"])
    if "d_mom" in _RECORD:
        d_mom = _RECORD["d_mom"][_RECORD["d_ok"]]
        var = np.nan_to_num(np.nanvar(d_mom, axis=0, ddof=1))
        d_rep = bins_mod.debiased_abs_sum(np.nan_to_num(d_mom), var)
        d_sd = d_rep.std(ddof=1)
        rows[SCORE_GROUP] = np.maximum([res.nc_ece_debiased - Z * d_sd, res.nc_ece_debiased + Z * d_sd], 0.0)
    else:
        rows[SCORE_GROUP] = rows[3]
    assert np.allclose(rows[SCORE_GROUP], [res.ci_low, res.ci_high], rtol=1e-9, atol=0), "shipped interval differs"
    return rows


def _multiclass_run(seed: int, kind: str, known: bool) -> np.ndarray:
    _RECORD.clear()
    p, a = mc_sim._sim(3000, seed, True)
    channels = mc_sim.T if known else None
    # "iv": the targets shipped before 2026-12-06 evening (classwise now defaults to "mvu", the rows below)
    res = calibration_test_multiclass(
        p, a, channels, kind=kind, weights="iv", n_boot=_runs.MULTICLASS_N_BOOT, seed=seed
    )
    rows = candidates(_RECORD["value"], _RECORD["b_val"], _RECORD["moments"], _RECORD["b_mom"])
    assert np.allclose(rows[SCORE_GROUP], [res.ci_low, res.ci_high], rtol=1e-9, atol=0), "shipped interval differs"
    extra = np.full((len(MVU_NAMES) + 1, 2), np.nan)
    if WITH_MVU:  # the same data and seed, so the same bootstrap draws (the draws do not depend on the targets)
        _RECORD.clear()
        mres = calibration_test_multiclass(p, a, channels, kind=kind, weights="mvu", n_boot=_runs.MULTICLASS_N_BOOT,
                                           seed=seed)
        m_rows = candidates(_RECORD["value"], _RECORD["b_val"], _RECORD["moments"], _RECORD["b_mom"])
        assert np.allclose(m_rows[SCORE_GROUP], [mres.ci_low, mres.ci_high], rtol=1e-9, atol=0)
        extra[0], extra[1] = m_rows[0], m_rows[3]
        extra[2] = m_rows[len(NAMES) + DIAG_LAMS.index(1.0)]  # (D(m̂), sd_b D(m*)) of the mvu targets
    return np.concatenate([rows, extra])


def top_label_known(seed: int) -> np.ndarray:
    return _multiclass_run(seed, "top_label", True)


def classwise_known(seed: int) -> np.ndarray:
    return _multiclass_run(seed, "classwise", True)


def top_label_estimated(seed: int) -> np.ndarray:
    return _multiclass_run(seed, "top_label", False)


def classwise_estimated(seed: int) -> np.ndarray:
    return _multiclass_run(seed, "classwise", False)


def main(setting: str, n_runs: int, estimated: bool, first_seed: int | None = None) -> None:
    _install_spies()
    if setting == "binary":
        fn, truth, base = binary_run, _runs.binary_truth(), 700_000
    else:
        fn = {("top_label", False): top_label_known, ("classwise", False): classwise_known,
              ("top_label", True): top_label_estimated, ("classwise", True): classwise_estimated}[(setting, estimated)]
        truth, base = _runs.multiclass_truth(setting), 710_000
    base = base if first_seed is None else first_seed
    t0 = time.perf_counter()
    rows = [fn(s) for s in range(base, base + n_runs)] if _runs.workers() == 1 else None
    if rows is None:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(_runs.workers(), mp_context=multiprocessing.get_context("fork")) as pool:
            rows = list(pool.map(fn, range(base, base + n_runs), chunksize=4))
    bounds = np.stack(rows)  # (R, candidates, 2)
    elapsed = time.perf_counter() - t0
    print(f"{setting}{' (estimated channels)' if estimated else ''}: truth {truth:.5f}; runs {n_runs}, seeds "
          f"{base}–{base + n_runs - 1}; {elapsed:.0f} s")
    width = bounds[:, :, 1] - bounds[:, :, 0]
    print("| candidate | coverage | MC s.e. | below | above | mean width | width / basic |")
    print("|---|---|---|---|---|---|---|")
    first_mvu = len(NAMES) + len(DIAG_LAMS)
    named = list(enumerate(NAMES))
    if bounds.shape[1] > first_mvu:
        named += [(first_mvu + i, name) for i, name in enumerate(MVU_NAMES)]
    for i, name in named:
        if np.isnan(bounds[:, i]).all():
            print(f"| {name} | not computed (--eb / --mvu) | | | | | |")
            continue
        below = np.mean(truth < bounds[:, i, 0])
        above = np.mean(truth > bounds[:, i, 1])
        cov = 1 - below - above
        se = np.sqrt(cov * (1 - cov) / n_runs)
        print(f"| {name} | {cov:.3f} | {se:.3f} | {below:.3f} | {above:.3f} | {width[:, i].mean():.5f} | "
              f"{width[:, i].mean() / width[:, 0].mean():.3f} |")
    basic_w = width[:, 0].mean()
    print("\n| centre | bias | empirical s.d. | mean bootstrap s.d. | ratio | coverage, mean s.d. in every run | "
          "exact-s.d. width / basic |")
    print("|---|---|---|---|---|---|---|")
    diag = [(f"D_{lam}", len(NAMES) + j) for j, lam in enumerate(DIAG_LAMS)]
    if bounds.shape[1] > len(NAMES) + len(DIAG_LAMS) and not np.isnan(bounds[:, -1]).all():
        diag.append(("D, mvu targets", bounds.shape[1] - 1))
    for label, col in diag:
        centre, sd = bounds[:, col, 0], bounds[:, col, 1]
        emp = centre.std(ddof=1)
        fixed = np.mean(np.abs(centre - truth) <= Z * sd.mean())
        print(f"| {label} | {centre.mean() - truth:+.5f} | {emp:.5f} | {sd.mean():.5f} | {sd.mean() / emp:.3f} | "
              f"{fixed:.3f} | {2 * Z * emp / basic_w:.3f} |")


def model() -> None:
    """One bin, m̂ ~ N(μ, 1) (σ̂ = σ = 1): bias and variance of D_λ; the variance of D in the bootstrap world
    (centred at m̂) and in the shrunk world (centred at sign(m̂)·D(m̂)⁺), averaged over m̂; then the two-parameter
    family's best points. Gauss–Hermite quadrature, no simulation."""
    from scipy.optimize import minimize

    z, w = np.polynomial.hermite_e.hermegauss(120)
    w = w / w.sum()

    def fold(x, k=1.0):
        return bins_mod.folded_normal_mean(x, k)

    def moments_of(g, mu):
        gx = g(np.asarray(mu, float)[..., None] + z)
        mean = (gx * w).sum(-1)
        return mean - np.abs(mu), ((gx - mean[..., None]) ** 2 * w).sum(-1)

    def d_lam(lam):
        return lambda x: (1 + lam) * np.abs(x) - lam * fold(x)

    grid = np.array([0, 0.5, 1, 1.5, 2, 2.5, 3, 4.0])
    print("| μ/σ | " + " | ".join(f"{m:g}" for m in grid) + " |")
    print("|---|" + "---|" * grid.size)
    for lam in (0.0, 0.8, 1.0):
        b, v = moments_of(d_lam(lam), grid)
        print(f"| bias of D_{lam} | " + " | ".join(f"{x:+.3f}" for x in b) + " |")
        print(f"| variance of D_{lam} | " + " | ".join(f"{x:.3f}" for x in v) + " |")
    worlds = {"bootstrap world": lambda x: x,
              "shrunk world": lambda x: np.sign(x) * np.maximum(2 * np.abs(x) - fold(x), 0.0)}
    for name, centre in worlds.items():
        var_w = [float((moments_of(d_lam(1.0), centre(mu + z))[1] * w).sum()) for mu in grid]
        print(f"| variance of D, {name} | " + " | ".join(f"{x:.3f}" for x in var_w) + " |")
    mu = np.linspace(0, 3.5, 36)
    x = mu[:, None] + z

    def summary(a, k):
        g = (1 + a) * np.abs(x) - a * fold(x, abs(k))
        mean = (g * w).sum(1)
        return mean - mu, ((g - mean[:, None]) ** 2 * w).sum(1)

    print("\ntwo-parameter family (1 + a)|x| − a·E_{N(x, κ²)}|R|, μ ∈ [0, 3.5]: mean variance, r.m.s. bias")
    for lam in (0.8, 1.0):
        b, v = summary(lam, 1.0)
        print(f"  D_{lam} (a = {lam}, κ = 1): {v.mean():.3f}, {np.sqrt((b ** 2).mean()):.3f}")
    def objective(q, pen):
        b, v = summary(*q)
        return v.mean() + pen * (b**2).mean()

    for pen in (10, 20, 30):
        res = minimize(objective, [1.0, 1.0], args=(pen,), method="Nelder-Mead")
        b, v = summary(*res.x)
        print(f"  best for w = {pen}: a = {res.x[0]:.3f}, κ = {abs(res.x[1]):.3f}: {v.mean():.3f}, "
              f"{np.sqrt((b ** 2).mean()):.3f}")


if __name__ == "__main__":
    argv = [a for a in sys.argv[1:] if not a.startswith("--")]
    if argv and argv[0] == "model":
        model()
        sys.exit()
    main(argv[0] if argv else "binary", int(argv[1]) if len(argv) > 1 else 100, "--estimated" in sys.argv,
         int(argv[2]) if len(argv) > 2 else None)
