"""Checks of the channel model's assumptions (Hanada and Futami 2026 §4.1, §D.7): conditional independence given the
class, and
channels that do not depend on the score.

Both are parametric-bootstrap tests of the shared-channel score-group model (§F.1.2) fitted on G score-quantile
groups: under it, given the class, annotators answer independently through channels (a_j, b_j) common to every
group, and group g has its own prevalence π_g. With K ≥ 3 annotators the one-group model is saturated on the
answer patterns (2^K − 1 cell probabilities, 2K + 1 parameters for K = 3), so both tests use the score groups to
obtain excess moments.

- Conditional independence: for each pair (j, k), the channels of j and of k are estimated without their joint
  answers, each from a two-annotator group model with a third annotator l (the identified pair-and-groups case,
  §4.2, §D.2); the model-implied agreement e_gjk = π_g[(1−b_j)(1−b_k) + b_j b_k] + (1 − π_g)[a_j a_k +
  (1−a_j)(1−a_k)] is compared with the observed agreement o_gjk on items labelled by both:
  per pair the n_gjk-weighted mean excess Σ_g n_gjk (o_gjk − e_gjk) / Σ_g n_gjk, divided by its standard deviation
  over the observed and the simulated tables together (`_pooled_sd`); T = the sum of their squares over pairs.
  Dependence between j and k moves o, not e.
- Score invariance: for every annotator and both error rates, the score statistic (Rao) of a linear trend
  over the ordered groups, θ_gj = θ_j + β·g, at the shared fit: Σ_g (g − ḡ)(x_gj − n_gj θ̂_j) with n_gj, x_gj
  the group's posterior-weighted class count and errors (`_trend_contrasts`), standardised by its standard
  deviation over the observed and the simulated tables together (`_pooled_sd`); T = the largest
  |standardised trend| (a channel that drifts with the score). Weighting by n_gj keeps groups that hold almost
  no item of a class (well-separated scores) from dominating T.
Null distribution: R tables simulated from the fitted model with each item's presence pattern kept, every model
refitted on each (vectorised EM); p = (1 + #{T* ≥ T}) / (1 + R). Replicates whose shared or pair refits are not
identified (gap ≤ 0.05 or not finite) are counted and left out. As §D.7 says, such moment checks are themselves
approximate near the boundary and under weak identification.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
from scipy.special import expit

from .channels import score_groups
from .channels._base import annotation_codes, as_annotation_array
from .inference import batched_em, bootstrap_p_value, simulate_answers

__all__ = ["AssumptionChecks", "assumption_checks"]

MIN_GAP = 0.05


class RawStatistics(NamedTuple):
    """Unscaled statistics of `raw_statistics`: (P,) pair excesses and (2K,) trends, observed and (R, ·) simulated;
    ``identified`` (R,) marks the replicates whose refits are identified and finite."""

    n_groups: int
    independence: np.ndarray
    trend: np.ndarray
    independence_star: np.ndarray
    trend_star: np.ndarray
    identified: np.ndarray


@dataclass(frozen=True)
class AssumptionChecks:
    """Statistics and p-values of the two checks (NaN with a ``note`` when they cannot run)."""

    independence_statistic: float
    independence_p_value: float
    invariance_statistic: float
    invariance_p_value: float
    n_groups: int
    n_replicates: int
    n_unidentified: int
    note: str = ""


def _agreement(counts: np.ndarray, pats: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(…, G, P) pattern counts → both-present counts, agreements per pair (…, G, pairs), and the pair index."""
    k = pats.shape[1]
    jj, kk = np.triu_indices(k, 1)
    both = (pats[:, jj] != 2) & (pats[:, kk] != 2)  # (P, pairs)
    agree = both & (pats[:, jj] == pats[:, kk])
    return counts @ both.astype(float), counts @ agree.astype(float), np.stack([jj, kk])


def _implied_agreement(prior: np.ndarray, fpr: np.ndarray, fnr: np.ndarray, pairs: np.ndarray) -> np.ndarray:
    j, k = pairs
    a, b = fpr[..., None, :], fnr[..., None, :]
    pos = (1 - b[..., j]) * (1 - b[..., k]) + b[..., j] * b[..., k]
    neg = a[..., j] * a[..., k] + (1 - a[..., j]) * (1 - a[..., k])
    pi = prior[..., :, None]
    return pi * pos + (1 - pi) * neg


def _pair_fits(counts: np.ndarray, pats: np.ndarray, prior0: np.ndarray, fpr0: np.ndarray, fnr0: np.ndarray):
    """Two-annotator score-group EM for every pair of columns on (R, G, P) tables: {(j, l): (prior, fpr, fnr)}.

    The pairs run as one `batched_em` call (each table stops on its own, as its own call would)."""
    k = pats.shape[1]
    r = counts.shape[0]
    sp = np.stack([np.arange(9) % 3, np.arange(9) // 3], axis=1).astype(np.int8)[:8]  # code 8 = neither labelled
    pairs = [(int(j), int(l)) for j, l in zip(*np.triu_indices(k, 1), strict=True)]
    tables, fpr_s, fnr_s = [], [], []
    for j, l in pairs:  # loop over annotator pairs (K small)
        sub = pats[:, [j, l]].astype(np.int64)
        code = sub[:, 0] + 3 * sub[:, 1]
        onto = np.zeros((pats.shape[0], 9))
        onto[np.arange(pats.shape[0]), code] = 1.0
        tables.append((counts @ onto)[..., :8])  # (R, G, 8) counts of the pair's sub-patterns
        fpr_s.append(fpr0[:, [j, l]])
        fnr_s.append(fnr0[:, [j, l]])
    prior_s = np.concatenate([np.broadcast_to(prior0, (r, prior0.shape[-1]))] * len(pairs))
    fit = batched_em(np.concatenate(tables), sp, prior_s, np.concatenate(fpr_s), np.concatenate(fnr_s))
    return {pair: tuple(x[i * r:(i + 1) * r] for x in fit[:3]) for i, pair in enumerate(pairs)}


def _independence_stat(counts, pats, prior, fpr, fnr) -> np.ndarray:
    """Σ over pairs and groups of n (o − e)² / (e(1 − e)), e from channels fitted without the pair's joint answers."""
    k = pats.shape[1]
    fits = _pair_fits(counts, pats, prior, fpr, fnr)
    n_both, n_agree, pairs = _agreement(counts, pats)
    gaps = 1.0 - fpr - fnr  # (R, K): the third annotator is the most informative other one
    excess = np.zeros((counts.shape[0], pairs.shape[1]))
    bad = np.zeros(counts.shape[0], bool)
    for c, (j, kk) in enumerate(pairs.T):  # loop over pairs
        others = [m for m in range(k) if m not in (j, kk)]
        third = np.array(others)[np.argmax(gaps[:, others], axis=1)]
        pieces = []
        for who in (j, kk):
            pr, a, b = (np.empty_like(prior), np.empty(counts.shape[0]), np.empty(counts.shape[0]))
            for m in np.unique(third):  # ≤ K − 2 choices
                rows = third == m
                key = (min(who, m), max(who, m))
                f_pr, f_a, f_b = fits[key]
                col = 0 if key[0] == who else 1
                pr[rows], a[rows], b[rows] = f_pr[rows], f_a[rows, col], f_b[rows, col]
            bad |= ~np.isfinite(a) | (1 - a - b <= MIN_GAP)
            pieces.append((pr, a, b))
        (p1, a1, b1), (p2, a2, b2) = pieces
        pi = 0.5 * (p1 + p2)
        e = pi * ((1 - b1) * (1 - b2) + b1 * b2)[:, None] + (1 - pi) * (a1 * a2 + (1 - a1) * (1 - a2))[:, None]
        e = np.clip(e, 1e-9, 1 - 1e-9)
        with np.errstate(invalid="ignore", divide="ignore"):
            o = np.where(n_both[..., c] > 0, n_agree[..., c] / n_both[..., c], e)
        excess[:, c] = (n_both[..., c] * (o - e)).sum(axis=1) / n_both[..., c].sum(axis=1)
    excess[bad] = np.nan
    return excess


def _fit_shared(counts: np.ndarray, pats: np.ndarray) -> tuple[np.ndarray, ...]:
    """Shared-channel group EM on (R, G, P) tables, started from the soft vote."""
    r = counts.shape[0]
    k = pats.shape[1]
    obs = pats != 2
    vote = np.where(obs.any(axis=1), (pats == 1).sum(axis=1) / np.maximum(obs.sum(axis=1), 1), 0.5)
    pi0 = (counts * vote).sum(axis=2) / counts.sum(axis=2)
    return batched_em(counts, pats, pi0, np.full((r, k), 0.15), np.full((r, k), 0.15))


def _trend_contrasts(counts: np.ndarray, pats: np.ndarray, prior: np.ndarray, fpr: np.ndarray, fnr: np.ndarray):
    """Studentised, information-weighted trends of the channels over the ordered score groups,
    (R, G, P) tables → (R, 2K).

    With the shared model's posteriors γ_p (§F.1.2), group g has n⁰_gj = Σ_{p∈g} w_p(1−γ_p)[j labelled]
    expected negatives labelled by j, of which x⁰_gj = Σ_{p∈g} w_p(1−γ_p)[A_j = 1] answered 1 (x⁰/n⁰ is the
    group's one-step FPR); likewise n¹, x¹ (answers 0) for the FNR. The trend of j's FPR is the contrast
    Σ_g (c_g − c̄_j)(x⁰_gj − n⁰_gj â_j), c_g = g, with c̄_j and â_j = Σ_g x⁰_gj / Σ_g n⁰_gj the n⁰-weighted
    means: the numerator of the weighted least-squares slope of the group FPRs on g (a score-type statistic).
    A group with (almost) no item of a class adds (almost) nothing to that class's trends, where the ratio
    x⁰/n⁰ of two tiny sums would dominate an unweighted trend. Each contrast is divided by its binomial s.d.
    sqrt(â_j(1 − â_j) Σ_g n⁰_gj (c_g − c̄_j)²) computed from the same table, so that observed and simulated
    statistics are the same function of their own data (a studentised parametric bootstrap, Hall 1992, "The
    Bootstrap and Edgeworth Expansion", ch. 3: a scale fixed at the observed fit makes the level depend on how
    far that fit is from the truth).
    """
    obs1 = (pats == 1).astype(float)
    obs = (pats != 2).astype(float)
    l1 = np.log1p(-fnr) @ obs1.T + np.log(fnr) @ (obs - obs1).T
    l0 = np.log(fpr) @ obs1.T + np.log1p(-fpr) @ (obs - obs1).T
    gamma = expit((l1 - l0)[:, None, :] + (np.log(prior) - np.log1p(-prior))[:, :, None])
    w1 = counts * gamma
    c = np.arange(counts.shape[1], dtype=float)[None, :, None]
    out = []
    for w, hit in ((counts - w1, obs1), (w1, obs - obs1)):  # FPR: negatives answering 1; FNR: positives, 0
        n_g, x_g = w @ obs, w @ hit  # (R, G, K)
        with np.errstate(invalid="ignore", divide="ignore"):
            rate = x_g.sum(axis=1, keepdims=True) / n_g.sum(axis=1, keepdims=True)
            c_bar = (n_g * c).sum(axis=1, keepdims=True) / n_g.sum(axis=1, keepdims=True)
            var = rate[:, 0] * (1 - rate[:, 0]) * (n_g * (c - c_bar) ** 2).sum(axis=1)
            out.append(((c - c_bar) * (x_g - n_g * rate)).sum(axis=1) / np.sqrt(var))
    return np.concatenate(out, axis=1)


def _pooled_sd(observed: np.ndarray, replicates: np.ndarray) -> np.ndarray:
    """Per-component s.d. (ddof 1) over the observed statistic and the identified replicates TOGETHER.

    The scale is part of the test statistic, so it must be one symmetric function of all R + 1 tables: then,
    were the observed table exchangeable with the simulated ones, its rank among them would be uniform and
    p = (1 + #{T* ≥ T}) / (1 + R) exact (Davison & Hinkley 1997, §4.2.5). A scale taken from the replicates
    alone lets each replicate inflate its own s.d. (a replicate in the tail, at |z| ≈ 2.6, by ≈ (z² − 1)/2R ≈ 3%
    at R = 100) while the observed statistic is scaled by a s.d. it took no part in: replicates in the tail are
    shrunk relative to the observed value and the p-value is too small. With the observed value left
    out, the score-invariance check warned in 48 and 55 of 1,000 clean runs (two bootstrap streams, tuning seeds
    25_000_000–25_000_999), with it pooled in 39 and 50 (benchmarks/size_power.md). NaN with fewer than two
    replicates."""
    if replicates.shape[0] < 2 or not np.isfinite(observed).all():
        return np.full(replicates.shape[1], np.nan)
    return np.vstack([observed[None], replicates]).std(axis=0, ddof=1)


def raw_statistics(a: np.ndarray, s: np.ndarray, n_groups: int, n_replicates: int, seed: int) -> RawStatistics:
    """The two checks' unscaled statistics on the data and on R tables simulated from the fitted shared model.

    a : (n, K) annotation array (`as_annotation_array`), K ≥ 3; s : (n,) scores. The per-pair independence
    excesses and the per-(class, annotator) trends, observed and simulated, before `_pooled_sd` scales them
    (benchmarks/tune_assumption_checks.py reads them to compare scale constructions).
    """
    k = a.shape[1]
    codes = annotation_codes(a)
    groups = score_groups(s, n_groups)
    g = int(groups.max()) + 1
    pat = (codes.astype(np.int64) * 3 ** np.arange(k)).sum(axis=1)
    keep = (codes != 2).any(axis=1)
    used, pat_idx = np.unique(pat[keep], return_inverse=True)
    pats = np.stack([(used // 3**j) % 3 for j in range(k)], axis=1).astype(np.int8)
    counts = np.zeros((g, len(used)))
    np.add.at(counts, (groups[keep], pat_idx), 1.0)  # ≤ n additions into a G × P table
    prior, fpr, fnr, _ = _fit_shared(counts[None], pats)
    t_ind = _independence_stat(counts[None], pats, prior, fpr, fnr)[0]
    trend = _trend_contrasts(counts[None], pats, prior, fpr, fnr)[0]

    # simulate R tables from the fitted shared model, keeping each group's presence patterns
    rng = np.random.default_rng(seed)
    present = pats != 2
    mask = present @ (1 << np.arange(k))
    h_key, h_inv = np.unique(np.repeat(np.arange(g), len(used)) * (1 << k) + np.tile(mask, g), return_inverse=True)
    n_h = np.bincount(h_inv, weights=counts.ravel())
    h_group, h_mask = h_key // (1 << k), h_key % (1 << k)
    sim, sim_codes = simulate_answers(n_h, prior[0][h_group], h_mask, fpr[0], fnr[0], k, n_replicates, rng)
    sim_pat = (sim_codes * 3 ** np.arange(k)).sum(axis=2)  # (H, 2^K)
    all_pat, col = np.unique(sim_pat, return_inverse=True)
    spats = np.stack([(all_pat // 3**j) % 3 for j in range(k)], axis=1).astype(np.int8)
    target = (np.repeat(h_group, 1 << k) * len(all_pat) + col.ravel()).astype(np.int64)
    rep = np.zeros((n_replicates, g * len(all_pat)))
    for t_col in range(sim.shape[1]):  # ≤ G·2^K columns (not items): scatter each into its (group, pattern)
        rep[:, target[t_col]] += sim[:, t_col]
    rep = rep.reshape(n_replicates, g, len(all_pat))
    rprior, rfpr, rfnr, _ = _fit_shared(rep, spats)
    t_ind_star = _independence_stat(rep, spats, rprior, rfpr, rfnr)
    trend_star = _trend_contrasts(rep, spats, rprior, rfpr, rfnr)
    ok = ((1 - rfpr - rfnr).min(axis=1) > MIN_GAP) & np.isfinite(t_ind_star).all(axis=1)
    ok &= np.isfinite(trend_star).all(axis=1)
    return RawStatistics(g, t_ind, trend, t_ind_star, trend_star, ok)


def assumption_checks(
    annotations: Any, scores: Any, n_groups: int = 4, n_replicates: int = 200, seed: int = 0
) -> AssumptionChecks:
    """Conditional-independence and score-invariance checks of the channel model (Hanada and Futami 2026 §D.7).

    annotations : (n, K), NaN (float) or −1 (int) = missing, K ≥ 3. scores : (n,) in [0, 1] (score groups are
    their ``n_groups`` quantile groups). Returns statistics and bootstrap p-values; NaN with a note for K < 3
    (the two-annotator group model is exactly identified and has no excess moments, §D.2).
    """
    a = as_annotation_array(annotations)
    s = np.asarray(scores, float)
    if s.shape != (a.shape[0],):
        raise ValueError(f"scores must have shape ({a.shape[0]},), got {s.shape}")
    k = a.shape[1]
    nan = float("nan")
    if k < 3:
        note = "needs three or more annotators: the two-annotator group model has no excess moments (§D.2)"
        return AssumptionChecks(nan, nan, nan, nan, 0, 0, 0, note)
    g, t_ind, trend, t_ind_star, trend_star, ok = raw_statistics(a, s, n_groups, n_replicates, seed)
    sd_ind = _pooled_sd(t_ind, t_ind_star[ok])
    t_ind_star = ((t_ind_star / sd_ind) ** 2).sum(axis=1)
    t_ind = float(((t_ind / sd_ind) ** 2).sum())
    sd = _pooled_sd(trend, trend_star[ok])
    t_inv = float(np.abs(trend / sd).max())
    t_inv_star = np.abs(trend_star[ok] / sd).max(axis=1)
    group_ok = bool(np.isfinite(trend).all())
    return AssumptionChecks(
        independence_statistic=t_ind,
        independence_p_value=bootstrap_p_value(t_ind, t_ind_star[ok]) if np.isfinite(t_ind) else nan,
        invariance_statistic=t_inv if group_ok else nan,
        invariance_p_value=bootstrap_p_value(t_inv, t_inv_star) if group_ok else nan,
        n_groups=g,
        n_replicates=int(n_replicates),
        n_unidentified=int((~ok).sum()),
        note="" if group_ok else "the shared fit puts (almost) no item in one class: no channel trend",
    )
