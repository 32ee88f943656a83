"""Batched channel refits for the calibration test's replicates (Hanada and Futami 2026 §F.1): binary EM on R
pattern-count
tables at once, aggregation weights and corrected labels per replicate, and `_Replicates`, which turns replicate
cell counts into NC-ECE values and per-bin moments.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..channels import ChannelFit
from ..nc_ece import PREVALENCE_CLIP
from ..weights import VAR_ZERO
from .resampling import SUB, _Cells, _scatter

__all__ = ["EM_EPS", "GROUP_METHODS", "MIN_PREVALENCE_SPREAD", "batched_em"]

EM_EPS = 1e-10
MIN_PREVALENCE_SPREAD = 0.05
GROUP_METHODS = ("score_group_em", "two_group")  # channel fits with one prevalence per score group


def batched_em(
    counts: np.ndarray,
    pats: np.ndarray,
    prior: np.ndarray,
    fpr: np.ndarray,
    fnr: np.ndarray,
    max_iter: int = 500,
    tol: float = 1e-8,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """EM for class-conditional binary channels on R pattern-count tables (Hanada and Futami 2026 §F.1.1–F.1.2).

    counts : (R, G, P) items per (replicate, group, pattern); pats : (P, K) codes 0/1/2 (2 = missing).
    prior : (R, G) start π_g; fpr, fnr : (R, K) starts. The E/M updates are those of
    `channels._em` (products over observed annotators, counts-weighted closed-form M-step, clip to [ε, 1−ε]),
    followed by the global exchange (π, a, b) → (1−π, 1−b, 1−a) where Σ_j δ_j < 0.
    Each table iterates on its own until its largest parameter change is < ``tol`` or ``max_iter`` steps
    (`_refit_kernel.em_tables`, compiled), so a table's result does not depend on the other tables of the call.
    Returns (prior, fpr, fnr, converged) with converged (R,) bool: largest parameter change < ``tol`` at the
    table's last step.
    """
    from ._refit_kernel import em_tables  # numba: compiled (or loaded from its cache) on the first call

    obs1 = (np.asarray(pats) == 1).astype(np.float64)
    obs0 = (np.asarray(pats) == 0).astype(np.float64)
    counts = np.ascontiguousarray(counts, dtype=np.float64)
    if counts.ndim != 3 or counts.shape[2] != obs1.shape[0]:
        raise ValueError(f"counts must be (R, G, {obs1.shape[0]}) for {obs1.shape[0]} patterns, got {counts.shape}")
    r, k = counts.shape[0], obs1.shape[1]
    prior, fpr, fnr = (
        np.ascontiguousarray(np.clip(np.broadcast_to(np.asarray(x, np.float64), shape), EM_EPS, 1 - EM_EPS))
        for x, shape in ((prior, (r, counts.shape[1])), (fpr, (r, k)), (fnr, (r, k)))
    )
    done, _ = em_tables(counts, obs1, obs0, prior, fpr, fnr, int(max_iter), float(tol), EM_EPS)
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
    and the inclusion mask Σ_j w_j [j present] > 0, (R, P) (Hanada and Futami 2026 §3)."""
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
