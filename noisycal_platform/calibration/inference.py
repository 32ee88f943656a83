"""Calibration test, debiased NC-ECE and an interval that carries channel-estimation error (seed 000 §3, §C.2–C.3,
§D.6).

NC-ECE = Σ_k |m_k| with the per-bin moment m_k = Σ_{i∈k}(Ỹ_i − s_i)/N (§3). Every replicate below re-estimates
the channels from its own data when they are not supplied, so the spread carries the channel error that the
bounds of §C.2–C.3 contain; supplied channels are held fixed.

Compression. Ỹ_i depends only on item i's answer pattern, so items are reduced once to cells
(fine score bin, score group, answer pattern) holding item counts and Σs, Σs². A replicate never touches items:

- bootstrap (items resampled with replacement): cell counts M ~ Multinomial(N, counts/N); the score sum of a
  cell is drawn as M·s̄_c + sqrt(M·v_c)·Z (Z standard normal, v_c the within-cell score variance), which matches
  the first two moments of the exact resample (cells are fine bins of width 1/(4B), so the spread is small);
- null (H0: P(Y=1 | s) = s): per (fine bin, group, set of annotators present) the number of positives is
  Binomial(n, s̄) (the exact Poisson-binomial has the same mean and a variance smaller by Σ(s_i − s̄)² ≤ n·h²/4,
  h = 1/(4B) the fine-bin width), then the answers of positives and negatives are Multinomial over the 2^|J|
  answer vectors of their channels. Which annotator labelled which item is kept; scores are fixed.
Channel refits are Dawid–Skene / score-group EM on the replicate's pattern counts (§F.1), vectorised over
replicates and warm-started at the point estimate. A replicate whose refit is not finite, has a gap ≤ min_gap,
or (two annotators) groups whose prevalences differ by ≤ 0.05 is *unidentified*: counted, reported and left
out of the quantiles. Both approximations are checked by the coverage and size simulations of the tests.
With K ≥ 3 estimated channels the bootstrap draws are evaluated twice: Dawid–Skene refits for the interval, and
shared-channel score-group EM refits (score groups as cells, §F.1.2) for the moments of the debiased value.

The per-bin pieces (`debiased_abs_sum`, `basic_interval`, `bootstrap_p_value`) work on arrays of per-bin
moments and replicate values, not on channel objects, so other label spaces can reuse them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl
from scipy import sparse
from scipy.special import expit, ndtr

from .channels import Channel, ChannelFit, NotIdentifiableError, estimate_channels, score_groups
from .channels._base import annotation_codes
from .channels.known import as_channels
from .nc_ece import PREVALENCE_CLIP, _ann_array, _check_n_bins, _check_scores, nc_ece
from .weights import VAR_ZERO, WEIGHT_RULES, resolve_weights

__all__ = [
    "CalibrationTest",
    "basic_interval",
    "batched_em",
    "bootstrap_p_value",
    "calibration_test",
    "debiased_abs_sum",
    "folded_normal_mean",
    "simulate_answers",
]

SUB = 4  # fine bins per evaluation bin (a power of two, so floor(s·4B)//4 == floor(s·B) exactly)
EM_EPS = 1e-10
MIN_PREVALENCE_SPREAD = 0.05
GROUP_METHODS = ("score_group_em", "two_group")  # channel fits with one prevalence per score group
DEBIAS_GROUPS = 5  # score groups of the channel fit behind nc_ece_debiased (K ≥ 3, estimated channels)


def folded_normal_mean(mu: Any, sigma: Any) -> np.ndarray:
    """E|R| for R ~ N(μ, σ²): σ·sqrt(2/π)·exp(−μ²/2σ²) + μ·(1 − 2Φ(−μ/σ)); |μ| where σ = 0."""
    mu = np.asarray(mu, float)
    sd = np.asarray(sigma, float)
    with np.errstate(invalid="ignore", divide="ignore"):
        t = mu / sd
        out = sd * np.sqrt(2 / np.pi) * np.exp(-0.5 * t * t) + mu * (1 - 2 * ndtr(-t))
    return np.where(sd > 0, out, np.abs(mu))


def debiased_abs_sum(moments: Any, variances: Any) -> np.ndarray:
    """max(Σ_k [2|m̂_k| − E_{R~N(m̂_k, σ̂_k²)}|R|], 0) over the last axis: a debiased estimate of Σ_k |m_k|.

    The debiased estimator of Kumar, Liang & Ma (2019), "Verified uncertainty calibration", NeurIPS, §5: each
    bin's plug-in |m̂_k| is corrected by its bias under a Gaussian model of m̂_k, E|R| − |m̂_k| (closed form,
    `folded_normal_mean`), with σ̂_k² the variance of m̂_k (here: its bootstrap variance with channel refits).
    Chosen over the debiased square root sqrt((m̂² − σ̂²)⁺), which is biased by about −σ²/(2|m|) when |m| is a few
    σ (where a miscalibrated predictor's bins sit). Bias left, with m̂_k ~ N(m_k, σ_k²): at m_k = 0 it is
    0.468·σ_k per bin (the plug-in's is 0.798·σ_k; no estimator of an absolute value is unbiased at 0, so the
    bias is left near zero, i.e. for calibrated bins); at |m_k| = σ_k it is −0.066·σ_k (plug-in +0.167·σ_k)
    and it vanishes for |m_k| ≫ σ_k. The sum is clipped at 0.
    Cost: where the plug-in's bias is small against its s.d. (most |m_k| ≥ 2σ_k), the correction's noise adds
    more error than it removes, because it falls as |m̂_k| rises (slope 3 − 2Φ(|m̂_k|/σ̂_k) > 1) and so moves with
    the plug-in's own error: about +2–3% mean absolute error against the plug-in on the same moments for a
    miscalibrated predictor with n = 3,000 (seed 000 setting), against −40% mean value for a calibrated one at
    n = 500. `calibration_test` recovers more than that cost by feeding it moments with more precise channels.
    """
    m = np.asarray(moments, float)
    v = np.maximum(np.asarray(variances, float), 0.0)
    return np.maximum((2 * np.abs(m) - folded_normal_mean(m, np.sqrt(v))).sum(axis=-1), 0.0)


def basic_interval(estimate: float, replicates: Any, level: float = 0.95) -> tuple[float, float]:
    """Basic (reverse-percentile) bootstrap interval [2θ̂ − q_{1−α/2}, 2θ̂ − q_{α/2}], clipped at 0 below.

    Davison & Hinkley (1997), "Bootstrap Methods and their Application", §5.2, eq. 5.6. It removes the
    bootstrap estimate of the bias of θ̂, which for an absolute value is upward. Replicates may hold NaN
    (unidentified), which are ignored.
    """
    r = np.asarray(replicates, float)
    r = r[np.isfinite(r)]
    if r.size == 0:
        return float("nan"), float("nan")
    lo_q, hi_q = np.quantile(r, [(1 - level) / 2, 1 - (1 - level) / 2])
    return max(2 * estimate - hi_q, 0.0), max(2 * estimate - lo_q, 0.0)


def bootstrap_p_value(observed: float, null_replicates: Any) -> float:
    """Monte Carlo p-value (1 + #{T* ≥ t}) / (1 + R) over the finite null replicates (Davison & Hinkley §4.2)."""
    r = np.asarray(null_replicates, float)
    r = r[np.isfinite(r)]
    return float((1 + np.count_nonzero(r >= observed)) / (1 + r.size))


# ------------------------------------------------------------------------------------------- channel refits
def batched_em(
    counts: np.ndarray,
    pats: np.ndarray,
    prior: np.ndarray,
    fpr: np.ndarray,
    fnr: np.ndarray,
    max_iter: int = 500,
    tol: float = 1e-8,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """EM for class-conditional binary channels on R pattern-count tables at once (seed 000 §F.1.1–F.1.2).

    counts : (R, G, P) items per (replicate, group, pattern); pats : (P, K) codes 0/1/2 (2 = missing).
    prior : (R, G) start π_g; fpr, fnr : (R, K) starts. The E/M updates are those of
    `channels._em` (products over observed annotators, counts-weighted closed-form M-step, clip to [ε, 1−ε]),
    followed by the global exchange (π, a, b) → (1−π, 1−b, 1−a) where Σ_j δ_j < 0.
    Returns (prior, fpr, fnr, converged) with converged (R,) bool: largest parameter change < ``tol``.
    """
    obs1 = (pats == 1).astype(float)
    obs = (pats != 2).astype(float)
    obs0 = obs - obs1
    prior, fpr, fnr = (np.clip(np.array(x, float), EM_EPS, 1 - EM_EPS) for x in (prior, fpr, fnr))
    n_g = counts.sum(axis=2)
    done = np.zeros(counts.shape[0], bool)
    with np.errstate(invalid="ignore", divide="ignore"):
        for _ in range(max_iter):  # EM iterations, each vectorised over replicates
            l1 = np.log1p(-fnr) @ obs1.T + np.log(fnr) @ obs0.T  # (R, P)
            l0 = np.log(fpr) @ obs1.T + np.log1p(-fpr) @ obs0.T
            logit = (l1 - l0)[:, None, :] + (np.log(prior) - np.log1p(-prior))[:, :, None]
            w1 = counts * expit(logit)
            w0 = counts - w1
            new_prior = np.clip(w1.sum(axis=2) / n_g, EM_EPS, 1 - EM_EPS)
            w1p, w0p = w1.sum(axis=1), w0.sum(axis=1)
            new_fpr = np.clip((w0p @ obs1) / (w0p @ obs), EM_EPS, 1 - EM_EPS)
            new_fnr = np.clip(1.0 - (w1p @ obs1) / (w1p @ obs), EM_EPS, 1 - EM_EPS)
            change = np.maximum(
                np.abs(new_prior - prior).max(axis=1),
                np.maximum(np.abs(new_fpr - fpr).max(axis=1), np.abs(new_fnr - fnr).max(axis=1)),
            )
            prior, fpr, fnr = new_prior, new_fpr, new_fnr
            done = change < tol
            if done.all():
                break
    flip = (1.0 - fpr - fnr).sum(axis=1) < 0
    if flip.any():
        prior[flip], fpr[flip], fnr[flip] = 1.0 - prior[flip], 1.0 - fnr[flip], 1.0 - fpr[flip]
    return prior, fpr, fnr, done


def _weights_batch(rule: Any, fpr: np.ndarray, fnr: np.ndarray, prevalence: np.ndarray) -> np.ndarray:
    """(R, K) aggregation weights of `weights.aggregation_weights` for R channel sets (explicit arrays fixed)."""
    if not isinstance(rule, str):
        return np.broadcast_to(np.asarray(rule, float), fpr.shape)
    gap = 1.0 - fpr - fnr
    if rule == "equal":
        w = np.ones_like(gap)
    elif rule == "gap":
        w = gap.copy()
    elif rule == "sqgap":
        w = gap**2
    else:
        pi = prevalence[:, None]
        v = (pi * fnr * (1 - fnr) + (1 - pi) * fpr * (1 - fpr)) / gap**2
        zero = v <= VAR_ZERO
        with np.errstate(divide="ignore"):
            w = np.where(zero.any(axis=1, keepdims=True), zero.astype(float), 1.0 / v)
    return w / w.sum(axis=1, keepdims=True)


def _pattern_labels(pats: np.ndarray, fpr: np.ndarray, fnr: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-pattern corrected labels Ỹ_p = Σ_j w_j [j present](x_pj − a_j)/δ_j / Σ_j w_j [j present], (R, P),
    and the inclusion mask Σ_j w_j [j present] > 0, (R, P) (seed 000 §3)."""
    present = (pats != 2).astype(float)
    x = (pats == 1).astype(float)
    gap = 1.0 - fpr - fnr
    den = w @ present.T
    num = (w / gap) @ x.T - (w * fpr / gap) @ present.T
    inc = den > 0
    with np.errstate(invalid="ignore", divide="ignore"):
        y = np.where(inc, num / den, 0.0)
    return y, inc


def _plugin_prevalence_batch(counts_p: np.ndarray, pats: np.ndarray, fpr: np.ndarray, fnr: np.ndarray) -> np.ndarray:
    """π̂ = mean of equally weighted corrected labels over annotated items, clipped (as `nc_ece`, §F.4)."""
    y, inc = _pattern_labels(pats, fpr, fnr, np.ones_like(fpr))
    tot = (counts_p * inc).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.clip((counts_p * y).sum(axis=1) / tot, PREVALENCE_CLIP, 1 - PREVALENCE_CLIP)


@dataclass(frozen=True, eq=False)
class CalibrationTest:
    """Result of `calibration_test`.

    nc_ece : the plug-in NC-ECE of seed 000 §3 (equal to `nc_ece` with the same channels and weights).
    nc_ece_debiased : `debiased_abs_sum` of per-bin moments with their bootstrap variances; with channels
        estimated for K ≥ 3 annotators the moments use score-group EM channels (see `calibration_test`).
    ci_low, ci_high : basic bootstrap interval for the population NC-ECE at level 1 − alpha.
    p_value : Monte Carlo p-value of H0 "P(Y = 1 | s) = s" (plug-in NC-ECE as the statistic).
    null_q95 : 95% quantile of the plug-in NC-ECE under H0 with these scores, channels and missingness.
    channels_refit : channels re-estimated in every replicate (False when channels were supplied).
    n_boot, n_unidentified_boot, n_unidentified_null : replicates drawn per side and those left out.
    bins : non-empty bins: bin, n, mean_score, mean_corrected_label, residual (plug-in), moment (m_k) and
        moment_se (its bootstrap s.e.), the inputs of nc_ece_debiased, null_low / null_high (2.5% / 97.5% of the
        mean corrected label a calibrated predictor shows in the bin under these channels).
    channels, weights, prevalence, method : the point-estimate channel fit and aggregation used.
    """

    nc_ece: float
    nc_ece_debiased: float
    ci_low: float
    ci_high: float
    p_value: float
    null_q95: float
    channels_refit: bool
    alpha: float
    n_boot: int
    n_unidentified_boot: int
    n_unidentified_null: int
    n_items: int
    n_bins: int
    bins: pl.DataFrame
    channels: tuple[Channel, ...]
    weights: np.ndarray
    prevalence: float
    method: str

    @property
    def rejected(self) -> bool:
        """H0 (calibrated) rejected at level ``alpha``."""
        return bool(self.p_value < self.alpha)


@dataclass(frozen=True, eq=False)
class _Cells:
    """Items compressed to (fine bin, group, pattern) cells; only annotated patterns are kept."""

    fine: np.ndarray  # (C,) fine bin of the cell
    group: np.ndarray  # (C,)
    pat: np.ndarray  # (C,) index into pats
    count: np.ndarray  # (C,) float
    ssum: np.ndarray
    ssq: np.ndarray
    pats: np.ndarray  # (P, K) codes
    n_groups: int


def _fine_bins(s: np.ndarray, n_fine: int) -> np.ndarray:
    """Fine bin min(floor(s·n_fine), n_fine − 1) of every score."""
    return np.minimum(np.floor(s * n_fine).astype(np.int64), n_fine - 1)


def _compress(s: np.ndarray, codes: np.ndarray, groups: np.ndarray, n_groups: int, n_fine: int) -> _Cells:
    n, k = codes.shape
    n_pat = 3**k
    fine = _fine_bins(s, n_fine)
    pat = np.zeros(n, np.int64)
    for j in range(k):  # loop over annotators
        pat += codes[:, j].astype(np.int64) * 3**j
    key = (fine * n_groups + groups) * n_pat + pat
    uniq, inv = np.unique(key, return_inverse=True)
    count = np.bincount(inv).astype(float)
    ssum = np.bincount(inv, weights=s)
    ssq = np.bincount(inv, weights=s * s)
    p_all = uniq % n_pat
    used, p_idx = np.unique(p_all, return_inverse=True)
    pats = np.stack([(used // 3**j) % 3 for j in range(k)], axis=1).astype(np.int8)
    keep = (pats[p_idx] != 2).any(axis=1)  # unannotated items are excluded from NC-ECE
    rest = uniq // n_pat
    return _Cells(
        rest[keep] // n_groups,
        rest[keep] % n_groups,
        p_idx[keep],
        count[keep],
        ssum[keep],
        ssq[keep],
        pats,
        n_groups,
    )


def _scatter(rows: np.ndarray, cols: np.ndarray, shape: tuple[int, int]) -> sparse.csr_matrix:
    return sparse.csr_matrix((np.ones(rows.size), (rows, cols)), shape=shape)


class _Replicates:
    """Turns replicate cell counts into NC-ECE values, per-bin moments and refit bookkeeping."""

    def __init__(self, cells: _Cells, n_bins: int, weights: Any, fit: ChannelFit, refit: bool, min_gap: float):
        self.cells, self.n_bins, self.weights, self.refit, self.min_gap = cells, n_bins, weights, refit, min_gap
        self.fit = fit
        self.n_pat = len(cells.pats)
        self.bin = cells.fine // SUB
        # cells → (group, pattern) for the refits and → (bin, pattern) for the moments
        self.to_gp = _scatter(
            np.arange(cells.count.size),
            cells.group * self.n_pat + cells.pat,
            (cells.count.size, cells.n_groups * self.n_pat),
        )
        self.to_bp = _scatter(
            np.arange(cells.count.size), self.bin * self.n_pat + cells.pat, (cells.count.size, n_bins * self.n_pat)
        )
        self.to_b = _scatter(np.arange(cells.count.size), self.bin, (cells.count.size, n_bins))

    def channels(self, counts_gp: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(fpr, fnr, prevalence, identified) per replicate: refitted, or the point estimate held fixed."""
        r = counts_gp.shape[0]
        k = self.cells.pats.shape[1]
        fpr0 = np.broadcast_to(self.fit.fpr, (r, k))
        fnr0 = np.broadcast_to(self.fit.fnr, (r, k))
        counts_p = counts_gp.reshape(r, self.cells.n_groups, self.n_pat).sum(axis=1)
        if not self.refit:
            prev = _plugin_prevalence_batch(counts_p, self.cells.pats, fpr0, fnr0)
            return fpr0, fnr0, prev, np.ones(r, bool)
        x = counts_gp.reshape(r, self.cells.n_groups, self.n_pat)
        if self.fit.method in GROUP_METHODS:  # per-group prevalences, channels shared (§F.1.2)
            gp = np.asarray(self.fit.diagnostics.get("group_prevalence", (self.fit.prevalence,)), float)
            if gp.size != self.cells.n_groups:  # a stored fit without per-group prevalences: start from π̂
                gp = np.full(self.cells.n_groups, self.fit.prevalence)
        else:  # one prevalence (Dawid–Skene, §F.1.1): the score groups of the cells are pooled
            x = x.sum(axis=1, keepdims=True)
            gp = np.array([self.fit.prevalence])
        prior, fpr, fnr, _ = batched_em(x, self.cells.pats, np.broadcast_to(gp, (r, gp.size)), fpr0, fnr0)
        n_g = x.sum(axis=2)
        prev = (prior * n_g).sum(axis=1) / n_g.sum(axis=1)
        gap = 1.0 - fpr - fnr
        ok = np.isfinite(gap).all(axis=1) & (gap.min(axis=1) > self.min_gap)
        if k == 2:
            ok &= (prior.max(axis=1) - prior.min(axis=1)) > MIN_PREVALENCE_SPREAD
        return fpr, fnr, prev, ok

    def evaluate(self, counts: np.ndarray, score_sum_bin: np.ndarray | None, cell_ssum: np.ndarray | None):
        """NC-ECE (R,), moments (R, B), mean corrected label per bin (R, B) and identified (R,).

        counts : (R, C) cell counts. Score sums per bin come from ``cell_ssum`` (R, C) or are fixed
        (``score_sum_bin`` (B,) per included-by-presence item set, null side)."""
        r = counts.shape[0]
        fpr, fnr, prev, ok = self.channels(np.asarray(counts @ self.to_gp))
        w = _weights_batch(self.weights, fpr, fnr, prev)
        y, inc = _pattern_labels(self.cells.pats, fpr, fnr, w)  # (R, P)
        cbp = np.asarray(counts @ self.to_bp).reshape(r, self.n_bins, self.n_pat)
        sum_y = np.einsum("rbp,rp->rb", cbp, y)
        n_b = np.einsum("rbp,rp->rb", cbp, inc.astype(float))
        if cell_ssum is not None:
            inc_c = inc[:, self.cells.pat]
            sum_s = np.asarray((cell_ssum * inc_c) @ self.to_b)
        else:
            sum_s = np.broadcast_to(score_sum_bin, (r, self.n_bins))
        n_tot = n_b.sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            moments = (sum_y - sum_s) / n_tot[:, None]
            mean_y = sum_y / n_b
        value = np.abs(moments).sum(axis=1)
        value[~ok] = np.nan
        moments[~ok] = np.nan
        mean_y[~ok] = np.nan
        return value, moments, mean_y, ok


def simulate_answers(
    n_h: np.ndarray,
    p_pos: np.ndarray,
    masks: np.ndarray,
    fpr: np.ndarray,
    fnr: np.ndarray,
    k: int,
    n_rep: int,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
    """Replicate answer counts for H item sets, each with ``n_h`` items, P(Y = 1) = ``p_pos`` and presence set
    ``masks`` (bit j = annotator j labelled): positives ~ Binomial(n, p), then the answers of positives and of
    negatives ~ Multinomial over the 2^K answer vectors (absent annotators fixed), from channels (fpr, fnr).

    Returns counts (R, H·2^K) in (set, answer vector) order and codes (H, 2^K, K): 0/1, 2 = not labelled.
    """
    answers = ((np.arange(1 << k)[:, None] >> np.arange(k)) & 1).astype(bool)  # (2^K, K)
    pres = ((np.asarray(masks)[:, None] >> np.arange(k)) & 1).astype(bool)  # (H, K)

    def probs(p_one: np.ndarray) -> np.ndarray:  # (H, 2^K): P(answers | Y) with absent annotators fixed at 0
        p = np.where(answers[None], p_one, 1.0 - p_one)
        return np.where(pres[:, None, :], p, ~answers[None]).prod(axis=2)

    n_int = np.round(n_h).astype(np.int64)
    pos = rng.binomial(n_int, np.clip(p_pos, 0.0, 1.0), size=(n_rep, n_int.size))
    draws = rng.multinomial(pos, probs(1.0 - fnr)) + rng.multinomial(n_int - pos, probs(fpr))  # (R, H, 2^K)
    codes = np.where(pres[:, None, :], answers[None].astype(np.int64), 2)
    return draws.reshape(n_rep, -1), codes


def _null_counts(cells: _Cells, fit: ChannelFit, n_rep: int, rng: np.random.Generator):
    """Replicate counts under H0 for every (fine bin, group, presence set): P(Y = 1) = the set's mean score."""
    k = cells.pats.shape[1]
    present = cells.pats[cells.pat] != 2  # (C, K)
    mask = present @ (1 << np.arange(k))  # presence set of each cell
    key = (cells.fine * cells.n_groups + cells.group) * (1 << k) + mask
    hk, hinv = np.unique(key, return_inverse=True)
    n_h = np.bincount(hinv, weights=cells.count)
    s_h = np.bincount(hinv, weights=cells.ssum) / n_h
    draws, codes = simulate_answers(n_h, s_h, hk % (1 << k), fit.fpr, fit.fnr, k, n_rep, rng)
    return draws, hk, codes


def _bootstrap_draws(cells: _Cells, n_boot: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Resample the items through their cells: counts (R, C) multinomial, score sums (R, C) moment-matched."""
    n_items = int(cells.count.sum())  # an exact integer held in float64
    counts = rng.multinomial(n_items, cells.count / cells.count.sum(), size=n_boot).astype(float)
    mean_c = cells.ssum / cells.count
    var_c = np.maximum(cells.ssq / cells.count - mean_c**2, 0.0)
    ssum = counts * mean_c + np.sqrt(counts * var_c) * rng.standard_normal(counts.shape)
    return counts, ssum


def _null_side(
    cells: _Cells,
    fit: ChannelFit,
    n_bins: int,
    weights: Any,
    refit: bool,
    min_gap: float,
    n_boot: int,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """H0 replicates: Y ~ Bernoulli(s), answers from the point-estimate channels, presence kept; scores fixed."""
    k = cells.pats.shape[1]
    draws, hk, codes = _null_counts(cells, fit, n_boot, rng)
    digits = 3 ** np.arange(k)
    seen = (cells.pats.astype(np.int64) * digits).sum(axis=1)
    drawn = (codes * digits).sum(axis=2).ravel()  # (H·2^K,) pattern code of every (set, answers) column
    all_codes = np.concatenate([seen, np.setdiff1d(drawn, seen)])  # patterns the data never showed come last
    order = np.argsort(all_codes)
    pats_all = np.stack([(all_codes // 3**j) % 3 for j in range(k)], axis=1).astype(np.int8)
    h_rep = np.repeat(np.arange(hk.size), 1 << k)
    fine_g = (hk // (1 << k))[h_rep]
    zeros = np.zeros(h_rep.size)
    null_cells = _Cells(
        fine_g // cells.n_groups,
        fine_g % cells.n_groups,
        order[np.searchsorted(all_codes[order], drawn)],
        zeros,
        zeros,
        zeros,
        pats_all,
        cells.n_groups,
    )
    w0 = _weights_batch(weights, fit.fpr[None], fit.fnr[None], np.array([fit.prevalence]))[:1]
    inc_cell = _pattern_labels(cells.pats, fit.fpr[None], fit.fnr[None], w0)[1][0][cells.pat]
    # scores per bin are fixed under H0; inclusion depends only on who labelled (weights > 0 on presence sets)
    s_bin = np.bincount(cells.fine[inc_cell] // SUB, weights=cells.ssum[inc_cell], minlength=n_bins)
    n_val, _, n_mean_y, n_ok = _Replicates(null_cells, n_bins, weights, fit, refit, min_gap).evaluate(
        draws.astype(float), s_bin, None
    )
    return n_val, n_mean_y, n_ok


def debias_groups(scores: np.ndarray, n_bins: int, n_groups: int = DEBIAS_GROUPS) -> np.ndarray | None:
    """Score groups for the debiased estimate's channel fit: the quantile groups of `score_groups` with every
    edge moved to the nearest fine-bin edge j/(4B), 1 ≤ j < 4B, so that no cell straddles two groups.

    Empty groups are dropped and the rest renumbered in score order; None where fewer than two remain."""
    n_fine = SUB * n_bins
    q = np.quantile(scores, np.arange(1, n_groups) / n_groups)
    edges = np.unique(np.clip(np.round(q * n_fine), 1, n_fine - 1))
    g = np.unique(np.searchsorted(edges, _fine_bins(scores, n_fine), side="right"), return_inverse=True)[1]
    return g.astype(np.int64) if g.max() > 0 else None


def _score_group_fit(a: np.ndarray, groups: np.ndarray | None, seed: int, min_gap: float) -> ChannelFit | None:
    """Shared-channel score-group EM (seed 000 §F.1.2) on ``groups``; None where it is not identified."""
    if groups is None:
        return None
    try:
        return estimate_channels(a, method="score_group_em", groups=groups, seed=seed, min_gap=min_gap)
    except NotIdentifiableError:
        return None


def calibration_test(
    scores: Any,
    annotations: Any,
    channels: Any = None,
    *,
    weights: Any = "iv",
    n_bins: int = 15,
    n_boot: int = 1000,
    alpha: float = 0.05,
    method: str = "auto",
    seed: int = 0,
    min_gap: float = 0.05,
    fitted: ChannelFit | None = None,
) -> CalibrationTest:
    """Plug-in and debiased NC-ECE, a bootstrap interval, and a test of H0 P(Y = 1 | s) = s (seed 000 §3, §C).

    Parameters
    ----------
    scores : (n,) in [0, 1]. annotations : (n, K), NaN (float) or −1 (int) = missing.
    channels : None → estimated by `estimate_channels(annotations, scores, method, seed=seed)` and re-estimated
        in every replicate; otherwise supplied channels, held fixed.
    weights : a rule of `aggregation_weights` or an explicit length-K array. With estimated channels the "iv"
        rule uses the fitted prevalence; with supplied ones the plug-in prevalence (as `nc_ece`).
    n_bins : B equal-width bins. n_boot : replicates on each side (bootstrap and null). alpha : test level; the
        interval has level 1 − alpha. min_gap : refits with a gap ≤ min_gap are unidentified.
    fitted : channels already estimated from these same annotations (for example a stored channel table, in
        annotation-column order); used as the point estimate instead of a new fit, and still re-estimated in
        every replicate. Requires ``channels`` None.

    The interval is the basic bootstrap interval (`basic_interval`) of the plug-in NC-ECE.

    `nc_ece_debiased` is the debiased estimator of Kumar, Liang & Ma (2019), "Verified uncertainty calibration",
    NeurIPS, §5 (`debiased_abs_sum`): Σ_k [2|m̂_k| − E_{N(m̂_k, σ̂_k²)}|R|], σ̂_k² the bootstrap variance of m̂_k.
    When the channels are estimated from K ≥ 3 annotators (Dawid–Skene for the plug-in), m̂_k and σ̂_k² come from
    shared-channel score-group EM instead (seed 000 §4.1, §F.1.2): one prevalence per score group
    (`debias_groups`, DEBIAS_GROUPS = 5 quantile groups on fine-bin edges), channels common to all groups, refitted
    the same way on the same bootstrap draws as the interval's. Why: here the plug-in's error is mostly channel
    error (a shift of (a_j, b_j) moves every bin's corrected label the same way), and the score as a covariate of
    the prevalence makes the channels more precise. Simulated (s ~ Beta(2, 3), P(Y=1 | s) = s^0.8 + 0.03,
    n = 3,000, the channels of seed 000's setting, 200 runs): plug-in MAE with score-group channels 0.00059
    (s.e. 0.00028) below Dawid–Skene's (G = 2: 0.00047), the debiasing costs +0.00017 (s.e. 0.00010), net
    −0.00042 (s.e. 0.00030). Assumption: channels do not depend on the score (diagnosed by the score-invariance
    check); K = 2 fits are score-group EM already and known channels are held fixed, both unchanged. Bias left
    (`debiased_abs_sum`): +0.47·σ_k per calibrated bin, −0.07 to −0.09·σ_k for |m_k| ≈ 1–2σ_k, ≈ 0 beyond 3σ_k.
    Score-group refits that are not identified are left out of σ̂_k² only (n_unidentified_* count the refits of
    the interval and the test).

    The null distribution is a parametric
    bootstrap under H0 from the point-estimate channels (Bröcker & Smith 2007, "Increasing the reliability of
    reliability diagrams", Weather Forecast. 22: consistency resampling, here with noisy annotators).
    """
    n_bins = _check_n_bins(n_bins)
    s = _check_scores(scores).astype(np.float64)
    a = _ann_array(annotations, s.size)
    k = a.shape[1]
    if not (isinstance(n_boot, (int, np.integer)) and n_boot >= 1):
        raise ValueError(f"n_boot must be a positive integer, got {n_boot!r}")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    if isinstance(weights, str) and weights not in WEIGHT_RULES:
        raise ValueError(f"weights must be one of {WEIGHT_RULES} or an array, got {weights!r}")
    if fitted is not None and channels is not None:
        raise ValueError("pass either channels (held fixed) or fitted (re-estimated in replicates), not both")
    refit = channels is None
    groups = np.zeros(s.size, np.int64)
    n_groups = 1
    if refit:
        fit = (
            fitted if fitted is not None else estimate_channels(a, scores=s, method=method, seed=seed, min_gap=min_gap)
        )
        if len(fit.channels) != k:
            raise ValueError(f"fitted has {len(fit.channels)} channels but annotations has {k} columns")
        if fit.method in GROUP_METHODS:
            groups = score_groups(s, 2)
            n_groups = int(groups.max()) + 1
        w_point = resolve_weights(weights, fit.channels, fit.prevalence)
        point = nc_ece(s, a, fit.channels, weights=w_point, n_bins=n_bins)
    else:
        chans = as_channels(channels, k)
        point = nc_ece(s, a, chans, weights=weights, n_bins=n_bins)
        fit = ChannelFit(chans, point.prevalence, "known", True, {})
        w_point = point.weights
    debias_fit, debias_point = fit, point
    if refit and fit.method not in GROUP_METHODS:
        split = debias_groups(s, n_bins)
        debias_fit = _score_group_fit(a, split, seed, min_gap) or fit
        if debias_fit is not fit:
            groups, n_groups = split, int(split.max()) + 1
            w_debias = resolve_weights(weights, debias_fit.channels, debias_fit.prevalence)
            debias_point = nc_ece(s, a, debias_fit.channels, weights=w_debias, n_bins=n_bins)
    cells = _compress(s, annotation_codes(a), groups, n_groups, SUB * n_bins)
    rep = _Replicates(cells, n_bins, weights, fit, refit, min_gap)
    boot_rng, null_rng = (np.random.default_rng(q) for q in np.random.SeedSequence(seed).spawn(2))

    b_counts, b_ssum = _bootstrap_draws(cells, n_boot, boot_rng)
    b_val, b_mom, _, b_ok = rep.evaluate(b_counts, None, b_ssum)
    if debias_fit is not fit:  # the same resampled items, refitted by score-group EM
        debias_rep = _Replicates(cells, n_bins, weights, debias_fit, refit, min_gap)
        _, b_mom, _, b_ok = debias_rep.evaluate(b_counts, None, b_ssum)
    n_val, n_mean_y, n_ok = _null_side(cells, fit, n_bins, weights, refit, min_gap, n_boot, null_rng)

    bins = point.bins
    idx = bins["bin"].to_numpy()
    d_idx = debias_point.bins["bin"].to_numpy()
    m_debias = debias_point.bins["n"].to_numpy() / debias_point.n_items * debias_point.bins["residual"].to_numpy()
    var_m = np.zeros(n_bins)
    if b_ok.sum() > 1:
        var_m = np.nan_to_num(np.nanvar(b_mom[b_ok], axis=0, ddof=1))
    debiased = float(debiased_abs_sum(m_debias, var_m[d_idx]))
    m_full = np.zeros(n_bins)
    m_full[d_idx] = m_debias
    lo, hi = basic_interval(point.value, b_val[b_ok], 1 - alpha)
    null_ok = n_val[n_ok]
    with np.errstate(invalid="ignore"):
        band = (
            np.nanquantile(n_mean_y[n_ok][:, idx], [0.025, 0.975], axis=0)
            if n_ok.any()
            else np.full((2, idx.size), np.nan)
        )
    bins = bins.with_columns(
        pl.Series("moment", m_full[idx]),
        pl.Series("moment_se", np.sqrt(var_m[idx])),
        pl.Series("null_low", band[0]),
        pl.Series("null_high", band[1]),
    )
    return CalibrationTest(
        nc_ece=point.value,
        nc_ece_debiased=debiased,
        ci_low=lo,
        ci_high=hi,
        p_value=bootstrap_p_value(point.value, null_ok),
        null_q95=float(np.quantile(null_ok, 0.95)) if null_ok.size else float("nan"),
        channels_refit=refit,
        alpha=float(alpha),
        n_boot=int(n_boot),
        n_unidentified_boot=int((~b_ok).sum()),
        n_unidentified_null=int((~n_ok).sum()),
        n_items=point.n_items,
        n_bins=n_bins,
        bins=bins,
        channels=tuple(fit.channels),
        weights=np.asarray(w_point, float),
        prevalence=float(fit.prevalence),
        method=fit.method,
    )
