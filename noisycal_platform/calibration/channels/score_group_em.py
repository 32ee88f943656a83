"""Shared-channel score-group EM ("joint score-bin EM", Hanada and Futami 2026 §4.1, §F.1.2, §D.6).

Items fall into groups g (score quantile groups, or explicit labels). Each group has its own prevalence
π_g; the annotator channels (a_j, b_j) are shared across groups. The E-step uses the prior π_{g(i)}; the
M-step sets π_g to the mean posterior in g and pools the channel updates over all groups. With K = 2 this
is identified when the π_g differ (§D.2); with K ≥ 3 informative annotators, always (§D.5).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._base import ChannelFit, NotIdentifiableError, as_annotation_array, labelled_pattern_counts
from ._em import fit_em_multistart, fit_summary
from .two_group import two_group

__all__ = ["score_group_em", "score_groups"]


def score_groups(scores: Any, n_groups: int = 2) -> np.ndarray:
    """Quantile groups of the scores: g_i = #{q_l ≤ s_i}, q_l the l/G sample quantiles (l = 1..G−1).

    Groups emptied by ties are dropped and the rest renumbered 0..G'−1 in score order.
    """
    s = np.asarray(scores, float)
    if s.ndim != 1 or s.size == 0:
        raise ValueError(f"scores must be a non-empty 1-D array, got shape {s.shape}")
    if not np.all(np.isfinite(s)):
        raise ValueError("scores must be finite")
    if n_groups < 1:
        raise ValueError(f"n_groups must be >= 1, got {n_groups}")
    edges = np.quantile(s, np.arange(1, n_groups) / n_groups)
    g = np.searchsorted(edges, s, side="right")
    _, g = np.unique(g, return_inverse=True)
    return g.astype(np.int64)


GROUP_HOMOGENEITY_P = 1e-3


def _require_group_separation(pats: np.ndarray, grp: np.ndarray, counts: np.ndarray, n_groups: int) -> None:
    """K = 2 needs π_g to differ, hence each annotator's mean m_jg = a_j + δ_j π_g to differ across groups.

    Pearson χ² test of homogeneity of P(A_j = 1) over the groups (df = G − 1) for each annotator; if either
    is consistent with equal means (p > 1e-3) the channels are not identified (§D.2) and EM would wander
    along a flat ridge.
    """
    from scipy.stats import chi2

    for j in range(pats.shape[1]):
        obs = pats[:, j] != 2
        n_g = np.bincount(grp[obs], weights=counts[obs], minlength=n_groups)
        k_g = np.bincount(grp[obs], weights=counts[obs] * (pats[obs, j] == 1), minlength=n_groups)
        used = n_g > 0
        pbar = k_g.sum() / n_g.sum()
        if not 0 < pbar < 1:
            raise NotIdentifiableError(
                f"annotator column {j} gives the same label to every item; it carries no "
                "information. Supply its channel as known or drop it"
            )
        stat = float(np.sum((k_g[used] - n_g[used] * pbar) ** 2 / n_g[used]) / (pbar * (1 - pbar)))
        pval = float(chi2.sf(stat, int(used.sum()) - 1))
        if pval > GROUP_HOMOGENEITY_P:
            raise NotIdentifiableError(
                f"annotator column {j} labels positive at the same rate in every group (χ² homogeneity p = "
                f"{pval:.3g}): the groups do not have different class proportions, so two annotators are not "
                "identified (Hanada and Futami 2026 §D.2). Use score groups that separate the classes better, explicit "
                "groups, "
                "a third annotator, or known channels"
            )


def score_group_em(
    annotations: Any,
    groups: Any,
    n_starts: int = 10,
    seed: int = 0,
    min_gap: float = 0.05,
    min_prevalence_spread: float = 0.05,
    orient: bool = True,
    max_iter: int = 5000,
    tol: float = 1e-11,
) -> ChannelFit:
    """Fit shared channels and per-group prevalences by multi-start EM (Hanada and Futami 2026 §F.1.2, §F.2).

    ``groups``: one label per item (any sortable values). For K = 2, start 0 is the two-group closed form
    when there are exactly two groups and it is feasible; the fit is refused (`NotIdentifiableError`)
    when max_g π_g − min_g π_g ≤ ``min_prevalence_spread``.
    """
    a = as_annotation_array(annotations)
    n, k = a.shape
    g = np.asarray(groups)
    if g.shape != (n,):
        raise ValueError(f"groups must have shape ({n},), got {g.shape}")
    levels, gi = np.unique(g, return_inverse=True)
    n_groups = len(levels)
    if k == 1:
        raise NotIdentifiableError(
            "one annotator cannot identify its channel, even with score groups (Hanada and Futami 2026 §D.1): add "
            "annotators "
            "(two with score groups of different class proportions, or three) or supply the channel as known"
        )
    if k == 2 and n_groups < 2:
        raise NotIdentifiableError(
            "two annotators in a single group are not identified (Hanada and Futami 2026 §D.1): supply scores or "
            "groups "
            "with different class proportions (n_groups >= 2), add a third annotator, or supply known "
            "channels"
        )
    pats, grp, counts = labelled_pattern_counts(a, gi, n_groups)
    present = np.bincount(grp, weights=counts, minlength=n_groups)
    if np.any(present == 0):
        raise ValueError(f"group {levels[int(np.flatnonzero(present == 0)[0])]!r} has no labelled item")
    if k == 2:
        _require_group_separation(pats, grp, counts, n_groups)
    init = None
    if k == 2 and n_groups == 2:
        try:
            cf = two_group(a, gi, min_gap=min_gap)
            init = (np.array(cf.diagnostics["group_prevalence"]), cf.fpr, cf.fnr)
        except NotIdentifiableError:
            init = None
    run, info = fit_em_multistart(
        pats,
        grp,
        counts,
        n_groups,
        n_starts,
        seed,
        min_gap,
        init=init,
        orient=orient,
        max_iter=max_iter,
        tol=tol,
    )
    spread = float(run.prior.max() - run.prior.min())
    if k == 2 and spread <= min_prevalence_spread:
        raise NotIdentifiableError(
            f"estimated group prevalences {np.round(run.prior, 4).tolist()} differ by {spread:.4f} ≤ "
            f"{min_prevalence_spread}: two annotators need groups with different class proportions "
            "(Hanada and Futami 2026 §D.2). Use score groups that separate the classes better, explicit groups, a "
            "third "
            "annotator, or known channels"
        )
    channels, diagnostics = fit_summary(run, int(counts.sum()))
    diagnostics.update(
        group_prevalence=tuple(float(p) for p in run.prior),
        groups=tuple(levels.tolist()),
        group_sizes=tuple(int(v) for v in present),
        initialised_from_closed_form=init is not None,
        **info,
    )
    prevalence = float(present @ run.prior / present.sum())
    return ChannelFit(channels, prevalence, "score_group_em", bool(run.converged), diagnostics)
