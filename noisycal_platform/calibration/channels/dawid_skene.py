"""Marginal Dawid–Skene EM for K ≥ 3 binary annotators (Hanada and Futami 2026 §4.3, §D.5, §F.1.1, §F.2).

Model: Y ~ Bernoulli(π); given Y the annotators answer independently through their channels
(a_j, b_j). The marginal likelihood of item i is (1−π)·Π_j a_j^{A_ij}(1−a_j)^{1−A_ij}
+ π·Π_j (1−b_j)^{A_ij} b_j^{1−A_ij}, products over the annotators who labelled i. Three informative
annotators with a common orientation identify (π, a, b) up to the global label exchange, which is fixed
by requiring Σ_j δ_j > 0. Scores are not used.

Fitted on answer-pattern counts (≤ 3^K cells), hence independent of n per iteration.

Reference: A. P. Dawid and A. M. Skene (1979), "Maximum likelihood estimation of observer error-rates
using the EM algorithm", J. R. Stat. Soc. C 28(1):20–28, doi:10.2307/2346806.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._base import ChannelFit, NotIdentifiableError, as_annotation_array, labelled_pattern_counts
from ._em import fit_em_multistart, fit_summary

__all__ = ["dawid_skene", "pairwise_association"]

INFORMATIVE_Z = 3.5


def pairwise_association(pats: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """z-scores of the pairwise covariances Cov(A_j, A_k) on items labelled by both (K×K, diagonal 0).

    Under the model Cov(A_j, A_k) = δ_j δ_k π(1 − π), so an informative, positively oriented pair has
    z ≫ 0. z = ĉ / sqrt(p̂_j(1−p̂_j) p̂_k(1−p̂_k) / n_jk), its s.e. under independence. Three count-weighted
    K×K products over the pattern cells (no loop over pairs).
    """
    obs = (pats != 2).astype(float)
    one = (pats == 1).astype(float)
    n = (obs * counts[:, None]).T @ obs  # n_jk: items labelled by both
    n1 = (one * counts[:, None]).T @ obs  # items with A_j = 1 among those labelled by both (row j)
    n11 = (one * counts[:, None]).T @ one
    with np.errstate(invalid="ignore", divide="ignore"):
        pj = n1 / n
        pk = n1.T / n
        cov = n11 / n - pj * pk
        se = np.sqrt(pj * (1 - pj) * pk * (1 - pk) / n)
        z = np.where((n >= 2) & (se > 0), cov / se, 0.0)
    np.fill_diagonal(z, 0.0)
    return z


def dawid_skene(
    annotations: Any,
    n_starts: int = 10,
    seed: int = 0,
    min_gap: float = 0.05,
    init: tuple[float, Any, Any] | None = None,
    orient: bool = True,
    max_iter: int = 5000,
    tol: float = 1e-11,
) -> ChannelFit:
    """Fit channels by marginal Dawid–Skene EM with multiple starts (Hanada and Futami 2026 §4.3, §F.2).

    Parameters
    ----------
    annotations : array of shape (n_items, K), K ≥ 3; float with NaN = missing, or int with -1 = missing.
    n_starts : number of EM starts (start 0: soft vote; others random from ``seed``).
    min_gap : fits with any estimated δ_j ≤ min_gap are screened out.
    init : optional start (π, a, b) replacing start 0 (used to test orientation).
    orient : apply the global exchange (π, a, b) → (1−π, 1−b, 1−a) when Σ_j δ_j < 0.
    max_iter, tol : EM stops when the largest parameter change is below ``tol``.
    """
    a = as_annotation_array(annotations)
    k = a.shape[1]
    if k < 3:
        raise NotIdentifiableError(
            f"dawid_skene needs at least 3 annotators, got {k}: with fewer and no scores the channels are "
            "not "
            "identified (Hanada and Futami 2026 §D.1). Use method='two_group' or 'score_group_em' with scores or "
            "groups "
            "whose class proportions differ, add a third annotator, or supply known channels"
        )
    if n_starts < 1:
        raise ValueError(f"n_starts must be >= 1, got {n_starts}")
    pats, grp, counts = labelled_pattern_counts(a)
    per_annot = ((pats != 2) * counts[:, None]).sum(axis=0)
    if np.any(per_annot == 0):
        j = int(np.flatnonzero(per_annot == 0)[0])
        raise ValueError(f"annotations column {j} has no label")
    z = pairwise_association(pats, counts)
    informative = (z > INFORMATIVE_Z).sum(axis=1) >= 1
    if informative.sum() < 3:
        raise NotIdentifiableError(
            f"fewer than three informative annotators: only columns {np.flatnonzero(informative).tolist()} "
            "show a positive association with another annotator (pairwise covariance z-scores > "
            f"{INFORMATIVE_Z}; max z per column {np.round(z.max(axis=1), 1).tolist()}). Dawid–Skene needs "
            "three informative annotators (Hanada and Futami 2026 §D.5): drop uninformative annotators and pass "
            "scores or groups (two annotators with score "
            "groups of different class proportions), add annotators, or supply known channels"
        )
    init_t = None
    if init is not None:
        init_t = (np.array([float(init[0])]), np.asarray(init[1], float), np.asarray(init[2], float))
    run, info = fit_em_multistart(
        pats, grp, counts, 1, n_starts, seed, min_gap, init=init_t, orient=orient, max_iter=max_iter, tol=tol
    )
    channels, diagnostics = fit_summary(run, int(counts.sum()))
    diagnostics.update(n_patterns=len(counts), pairwise_z=np.round(z, 3).tolist(), **info)
    return ChannelFit(channels, float(run.prior[0]), "dawid_skene", bool(run.converged), diagnostics)
