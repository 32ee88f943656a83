"""Closed-form channels of two annotators in two score groups (Hanada and Futami 2026 §4.2, §D.2, §D.3).

Per group g with prevalence π_g and a channel shared across groups:
    m_jg = E[A_j | g] = a_j + δ_j π_g,      c_g = Cov(A_1, A_2 | g) = δ_1 δ_2 π_g (1 − π_g).
With Δ_j = m_j1 − m_j2 = δ_j D (D = π_1 − π_2) and u_g = c_g / (Δ_1 Δ_2) = π_g(1 − π_g)/D²:
    D² = 1 / (1 + 2(u_1 + u_2) + (u_1 − u_2)²),  sign(D) = sign(Δ_1)  (orientation δ_1 > 0),
    π_1 = (1 − (u_1 − u_2) D + D)/2,  π_2 = π_1 − D,  δ_j = Δ_j / D,  a_j = m_j1 − δ_j π_1,
    b_j = 1 − a_j − δ_j.
Identified only when π_1 ≠ π_2 (and both δ_j ≠ 0); otherwise `NotIdentifiableError`. Empirical
moments use the 1/n_g covariance convention on items labelled by both annotators.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._base import Channel, ChannelFit, NotIdentifiableError, as_annotation_array

__all__ = ["two_group", "two_group_from_moments"]

_WHAT_IDENTIFIES = (
    "Two annotators are identified only in two groups with different class proportions (Hanada and Futami 2026 §D.2): "
    "use score groups that separate the classes (e.g. low vs high predicted score), explicit groups, "
    "a third annotator, or supply known channels"
)


def two_group_from_moments(
    means: Any, covariances: Any, min_gap: float = 0.05
) -> tuple[tuple[Channel, Channel], tuple[float, float]]:
    """Invert group moments: ``means[j][g]`` = E[A_j | g], ``covariances[g]`` = Cov(A_1, A_2 | g) (§4.2).

    Returns ``((channel_1, channel_2), (π_1, π_2))``.
    """
    m = np.asarray(means, float)
    c = np.asarray(covariances, float)
    if m.shape != (2, 2) or c.shape != (2,):
        raise ValueError(f"means must be 2×2 and covariances length 2, got {m.shape} and {c.shape}")
    d1, d2 = m[0, 0] - m[0, 1], m[1, 0] - m[1, 1]
    prod = d1 * d2
    if not np.isfinite(prod) or abs(prod) < 1e-12:
        raise NotIdentifiableError(
            f"group mean differences Δ_1={d1:.3g}, Δ_2={d2:.3g}: the groups have (nearly) equal class "
            f"proportions or an annotator is uninformative. {_WHAT_IDENTIFIES}"
        )
    u = c / prod
    if np.any(u <= 0):
        raise NotIdentifiableError(
            f"within-group covariances {c.tolist()} have the wrong sign for Δ_1Δ_2={prod:.3g} "
            f"(u = {u.tolist()} must be > 0): the moments are inconsistent with conditionally independent "
            f"annotators or the groups barely differ. {_WHAT_IDENTIFIES}"
        )
    dd = 1.0 / np.sqrt(1.0 + 2.0 * (u[0] + u[1]) + (u[0] - u[1]) ** 2)
    dd = dd if d1 > 0 else -dd
    p1 = (1.0 - (u[0] - u[1]) * dd + dd) / 2.0
    p2 = p1 - dd
    gaps = np.array([d1, d2]) / dd
    fpr = m[:, 0] - gaps * p1
    fnr = 1.0 - fpr - gaps
    vals = np.array([p1, p2, *fpr, *fnr])
    tol = 1e-9
    if np.any(vals < -tol) or np.any(vals > 1 + tol):
        raise NotIdentifiableError(
            f"the closed form gives values outside [0, 1] (π={[p1, p2]}, a={fpr.tolist()}, "
            f"b={fnr.tolist()}): "
            f"the groups separate the classes too weakly or the model is misspecified. {_WHAT_IDENTIFIES}"
        )
    if gaps.min() <= min_gap:
        j = int(np.argmin(gaps))
        raise NotIdentifiableError(
            f"annotator {j} has estimated gap {gaps[j]:.4f} ≤ min_gap={min_gap} (opposite orientation or "
            "uninformative); it cannot be inverted. Supply known channels or a third informative annotator"
        )
    fpr, fnr = np.clip(fpr, 0.0, 1.0), np.clip(fnr, 0.0, 1.0)
    chans = (Channel(float(fpr[0]), float(fnr[0])), Channel(float(fpr[1]), float(fnr[1])))
    return chans, (float(np.clip(p1, 0, 1)), float(np.clip(p2, 0, 1)))


def two_group(annotations: Any, groups: Any, min_gap: float = 0.05) -> ChannelFit:
    """Closed-form channels from two annotators' group means and covariances (Hanada and Futami 2026 §4.2).

    ``groups`` holds exactly two distinct labels (one per item); only items labelled by both annotators
    are used. Group order is the sorted order of the labels.
    """
    a = as_annotation_array(annotations)
    if a.shape[1] != 2:
        raise ValueError(f"two_group needs exactly 2 annotator columns, got {a.shape[1]}")
    g = np.asarray(groups)
    if g.shape != (a.shape[0],):
        raise ValueError(f"groups must have shape ({a.shape[0]},), got {g.shape}")
    levels, gi = np.unique(g, return_inverse=True)
    if len(levels) != 2:
        raise NotIdentifiableError(f"two_group needs exactly 2 groups, got {len(levels)}. {_WHAT_IDENTIFIES}")
    x = a.astype(float)
    if np.issubdtype(a.dtype, np.integer):
        x[a < 0] = np.nan
    both = ~np.isnan(x).any(axis=1)
    means = np.empty((2, 2))
    covs = np.empty(2)
    counts = []
    for gg in range(2):  # two groups
        sel = x[both & (gi == gg)]
        if len(sel) < 2:
            raise NotIdentifiableError(
                f"group {levels[gg]!r} has {len(sel)} items labelled by both annotators. {_WHAT_IDENTIFIES}"
            )
        counts.append(len(sel))
        means[:, gg] = sel.mean(axis=0)
        covs[gg] = np.mean((sel[:, 0] - means[0, gg]) * (sel[:, 1] - means[1, gg]))
    chans, prev = two_group_from_moments(means, covs, min_gap=min_gap)
    n = np.array(counts, float)
    diagnostics = {
        "log_likelihood": float("nan"),
        "n_iter": 0,
        "n_starts": 1,
        "starts_accepted": 1,
        "min_gap": float(min(c.gap for c in chans)),
        "n_items": int(n.sum()),
        "group_prevalence": prev,
        "groups": tuple(levels.tolist()),
        "group_sizes": tuple(int(v) for v in n),
    }
    return ChannelFit(chans, float(n @ np.array(prev) / n.sum()), "two_group", True, diagnostics)
