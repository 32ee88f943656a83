"""Coverage and width of candidate NC-ECE intervals on the same bootstrap replicates (issue 23 item 1).

Settings (the guarantee tier's, tests/guarantees/_runs.py):
- ``binary``: n = 3,000, P(Y=1 | s) = min(s^0.8 + 0.03, 1), three annotators, Dawid–Skene channels refitted in
  every bootstrap replicate (tests/unit/calibration/test_inference.py ``_sim``), n_boot 200;
- ``top_label`` / ``classwise``: 5 classes, 3 annotators, p ∝ p_true^1.5, n = 3,000, known confusion matrices
  (tests/unit/calibration/multiclass/test_inference.py ``_sim``), n_boot 100; ``--estimated`` refits them.

The shipped tests run unchanged; their replicate arrays are recorded by wrapping the replicate evaluation, and
every candidate is computed from the same record, so the comparison is paired. The shipped interval is the
"debiased normal" row (binary: the score-group-moments row); `ci_low`/`ci_high` of the result equal it.

Seeds (TUNING; disjoint from the guarantee tier's 23,000,000–23,069,999 and the unit tests'): binary data and
bootstrap seed 700,000 + r; multi-class 710,000 + r.

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
  left at zero ((0.798 − 0.330λ)·σ_k per bin); rows for λ = 0.6, 0.8, 0.9

Usage: nice -n 10 python benchmarks/bench_interval_coverage.py SETTING [n_runs [first_seed]] [--estimated]
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
PARTIAL = (0.6, 0.8, 0.9)
NAMES = ("basic", "percentile", "normal", "debiased normal", "debiased basic", "debiased centre, plug-in s.d.",
         "debiased pivot", *(f"partly debiased normal, λ = {lam}" for lam in PARTIAL),
         "debiased normal, score-group moments (binary; else = debiased normal)")


def partly_debiased(moments: np.ndarray, var: np.ndarray, lam: float) -> np.ndarray:
    """D_λ over the last axis: max(Σ_k [(1 + λ)|m_k| − λ·E_{N(m_k, σ̂_k²)}|R|], 0)."""
    folded = bins_mod.folded_normal_mean(moments, np.sqrt(var))
    return np.maximum(((1 + lam) * np.abs(moments) - lam * folded).sum(axis=-1), 0.0)
_RECORD: dict = {}


def candidates(value: float, b_val: np.ndarray, moments: np.ndarray, b_mom: np.ndarray) -> np.ndarray:
    """(len(NAMES), 2) bounds from one run's record."""
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
    for lam in PARTIAL:
        centre = float(partly_debiased(moments, var, lam))
        half = Z * partly_debiased(np.nan_to_num(b_mom), var, lam).std(ddof=1)
        out.append((centre - half, centre + half))
    out.append(out[3])
    return np.maximum(np.array(out, float), 0.0)


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
        rows[-1] = np.maximum([res.nc_ece_debiased - Z * d_sd, res.nc_ece_debiased + Z * d_sd], 0.0)
    assert np.allclose(rows[-1], [res.ci_low, res.ci_high], rtol=1e-9, atol=0), "shipped interval differs"
    return rows


def _multiclass_run(seed: int, kind: str, known: bool) -> np.ndarray:
    _RECORD.clear()
    p, a = mc_sim._sim(3000, seed, True)
    res = calibration_test_multiclass(p, a, mc_sim.T if known else None, kind=kind,
                                      n_boot=_runs.MULTICLASS_N_BOOT, seed=seed)
    rows = candidates(_RECORD["value"], _RECORD["b_val"], _RECORD["moments"], _RECORD["b_mom"])
    assert np.allclose(rows[3], [res.ci_low, res.ci_high], rtol=1e-9, atol=0), "shipped interval differs"
    return rows


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
    for i, name in enumerate(NAMES):
        below = np.mean(truth < bounds[:, i, 0])
        above = np.mean(truth > bounds[:, i, 1])
        cov = 1 - below - above
        se = np.sqrt(cov * (1 - cov) / n_runs)
        print(f"| {name} | {cov:.3f} | {se:.3f} | {below:.3f} | {above:.3f} | {width[:, i].mean():.5f} | "
              f"{width[:, i].mean() / width[:, 0].mean():.3f} |")


if __name__ == "__main__":
    argv = [a for a in sys.argv[1:] if not a.startswith("--")]
    main(argv[0] if argv else "binary", int(argv[1]) if len(argv) > 1 else 100, "--estimated" in sys.argv,
         int(argv[2]) if len(argv) > 2 else None)
