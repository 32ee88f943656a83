"""Paired stratified bootstrap for H_f, D_f and criterion differences (Rethinking Correctness 2026 §3.1).

Each replicate draws, independently within every stratum (dataset-model group x EM-accepted/EM-rejected),
as many
items as the stratum holds, so group sizes and EM quotas are fixed. A replicate is a vector of counts w (B
x n);
the same w is applied to every criterion, the human labels and every UE method (paired).

AUROC on a replicate is the weighted Mann-Whitney statistic
    A = sum_ij w_i w_j y_i (1 - y_j) [1(u_i > u_j) + 1/2 1(u_i = u_j)] / (sum_i w_i y_i)(sum_j w_j (1 - y_j)),
which equals sklearn's roc_auc_score on the resampled items (midrank ties). It is one float32 matrix
product per
task; all partial sums are integers or halves below 2**24, so float32 is exact; the division is float64.
Hand-written: no library computes AUROC over bootstrap count vectors.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

__all__ = [
    "BootstrapReplicates",
    "bootstrap_auroc",
    "paired_bootstrap",
    "percentile_ci",
    "stratified_counts",
]


def stratified_counts(strata: ArrayLike, n_boot: int, rng: np.random.Generator | int) -> np.ndarray:
    """(n_boot, n) float32 bootstrap multiplicities; each stratum's counts sum to its size in every
    replicate."""
    s = np.asarray(strata)
    if s.ndim != 1 or s.size == 0:
        raise ValueError(f"strata must be a non-empty 1-D array, got shape {s.shape}")
    if n_boot < 1:
        raise ValueError(f"n_boot must be >= 1, got {n_boot}")
    rng = np.random.default_rng(rng)
    w = np.zeros((n_boot, s.size), dtype=np.float32)
    for value in np.unique(s):
        idx = np.flatnonzero(s == value)
        k = idx.size
        # multinomial(k, uniform) == counts of k uniform index draws; bincount over (replicate, index) codes
        draws = rng.integers(0, k, size=(n_boot, k)) + (np.arange(n_boot) * k)[:, None]
        w[:, idx] = np.bincount(draws.ravel(), minlength=n_boot * k).reshape(n_boot, k)
    return w


def _comparison(u: np.ndarray, pos: np.ndarray, neg: np.ndarray) -> np.ndarray:
    up, un = u[pos][:, None], u[neg][None, :]
    return (up > un).astype(np.float32) + np.float32(0.5) * (up == un)


def bootstrap_auroc(counts: np.ndarray, uncertainty: ArrayLike, error: ArrayLike) -> np.ndarray:
    """(B,) AUROC of `uncertainty` for `error` (positive) under each row of bootstrap counts; nan if a
    class is absent."""
    w = np.asarray(counts, dtype=np.float32)
    u = np.asarray(uncertainty, dtype=np.float64)
    y = np.asarray(error).astype(bool)
    if w.ndim != 2 or w.shape[1] != u.shape[0] or u.shape != y.shape:
        raise ValueError(
            f"counts (B, n), uncertainty (n,), error (n,) expected; got {w.shape}, {u.shape}, {y.shape}"
        )
    if not np.all(np.isfinite(u)):
        raise ValueError("uncertainty contains non-finite values")
    pos, neg = np.flatnonzero(y), np.flatnonzero(~y)
    if pos.size == 0 or neg.size == 0:
        return np.full(w.shape[0], np.nan)
    wp, wn = w[:, pos], w[:, neg]
    num = np.einsum("bj,bj->b", wp @ _comparison(u, pos, neg), wn).astype(np.float64)
    den = wp.sum(1, dtype=np.float64) * wn.sum(1, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


@dataclass(frozen=True)
class BootstrapReplicates:
    """Per-replicate, per-group statistics; the last label index of `auroc` is the human reference.

    h_group: (B, C, G) balanced accuracy of each criterion per group.
    auroc:   (B, C + 1, M, G) error-detection AUROC per label set (criteria..., human), UE method and group.
    """

    h_group: np.ndarray
    auroc: np.ndarray
    criteria: tuple[str, ...]
    ue_methods: tuple[str, ...]
    groups: tuple[str, ...]

    def h_f(self, groups: np.ndarray | None = None) -> np.ndarray:
        """(B, C) H_f: mean of h_group over the selected groups (all by default)."""
        sel = self.h_group if groups is None else self.h_group[:, :, groups]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            return np.nanmean(sel, axis=2)

    def d_f(self, groups: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """((B, C) D_f, (B, C) undefined task count): mean over methods x groups of |AUROC_f -
        AUROC_human|."""
        a = self.auroc if groups is None else self.auroc[..., groups]
        diff = np.abs(a[:, :-1] - a[:, -1:])
        b, c = diff.shape[:2]
        diff = diff.reshape(b, c, -1)
        undefined = np.isnan(diff).sum(axis=2)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            d = np.nanmean(diff, axis=2)
        return d, undefined


def paired_bootstrap(
    accepted: ArrayLike,
    human_correct: ArrayLike,
    uncertainty: ArrayLike,
    group: ArrayLike,
    em_accepted: ArrayLike,
    *,
    criteria: tuple[str, ...],
    ue_methods: tuple[str, ...],
    n_boot: int = 10_000,
    seed: int | np.random.Generator = 0,
    counts: np.ndarray | None = None,
) -> BootstrapReplicates:
    """Paired stratified bootstrap over audited items.

    accepted (n, C) bool per criterion; human_correct (n,); uncertainty (n, M) finite; group (n,) labels;
    em_accepted (n,) the EM stratum. Pass `counts` (B, n) to reuse a resample; pass counts=np.ones((1, n)) for
    the point estimate.
    """
    acc = np.asarray(accepted).astype(bool)
    hc = np.asarray(human_correct).astype(bool)
    u = np.asarray(uncertainty, dtype=np.float64)
    g = np.asarray(group)
    em = np.asarray(em_accepted).astype(bool)
    n = hc.shape[0]
    if acc.shape != (n, len(criteria)):
        raise ValueError(f"accepted must have shape ({n}, {len(criteria)}), got {acc.shape}")
    if u.shape != (n, len(ue_methods)):
        raise ValueError(f"uncertainty must have shape ({n}, {len(ue_methods)}), got {u.shape}")
    if g.shape != (n,) or em.shape != (n,):
        raise ValueError(f"group and em_accepted must have shape ({n},), got {g.shape} and {em.shape}")
    if not np.all(np.isfinite(u)):
        bad = [ue_methods[j] for j in np.flatnonzero(~np.isfinite(u).all(axis=0))]
        raise ValueError(f"uncertainty has non-finite values for UE methods {bad}")
    groups, ginv = np.unique(g, return_inverse=True)
    if counts is None:
        counts = stratified_counts(ginv * 2 + em, n_boot, seed)
    w = np.asarray(counts, dtype=np.float32)
    if w.ndim != 2 or w.shape[1] != n:
        raise ValueError(f"counts must have shape (B, {n}), got {w.shape}")
    b, n_c, n_m, n_g = w.shape[0], len(criteria), len(ue_methods), groups.size

    # H: weighted recalls per group via one product with indicator columns.
    h_group = np.empty((b, n_c, n_g))
    for gi in range(n_g):
        m = ginv == gi
        wg = w[:, m].astype(np.float64)
        pos, neg = hc[m], ~hc[m]
        n_pos, n_neg = wg @ pos, wg @ neg
        tp = wg @ (acc[m] & pos[:, None])
        tn = wg @ (~acc[m] & neg[:, None])
        with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            r = np.stack([tp / n_pos[:, None], tn / n_neg[:, None]])
            h_group[:, :, gi] = np.nanmean(r, axis=0)  # a class absent in a replicate: the other's recall

    errors = ~np.concatenate([acc, hc[:, None]], axis=1)  # positives (errors) under each label set
    auroc = np.empty((b, n_c + 1, n_m, n_g))
    for gi in range(n_g):
        idx = np.flatnonzero(ginv == gi)
        auroc[:, :, :, gi] = _group_auroc(w[:, idx], u[idx], errors[idx])
    return BootstrapReplicates(
        h_group, auroc, tuple(criteria), tuple(ue_methods), tuple(str(x) for x in groups)
    )


def _group_auroc(w: np.ndarray, u: np.ndarray, errors: np.ndarray, max_elems: int = 1 << 24) -> np.ndarray:
    """(B, L, M) AUROC for every label set x UE method of one group, batched into one GEMM per chunk of
    replicates.

    num[b, l, m] = sum_ij (w_bi e_il) S^m_ij (w_bj (1 - e_jl)), S^m_ij = 1(u_im > u_jm) + 1/2 1(u_im = u_jm).
    """
    b, n = w.shape
    n_l, n_m = errors.shape[1], u.shape[1]
    s_cat = np.concatenate([_comparison(u[:, m], np.arange(n), np.arange(n)) for m in range(n_m)], axis=1)
    e = errors.T.astype(np.float32)  # (L, n)
    out = np.empty((b, n_l, n_m))
    step = max(1, max_elems // max(1, n_l * n_m * n))
    for lo in range(0, b, step):
        wc = w[lo : lo + step]
        wp = wc[None] * e[:, None, :]  # (L, c, n)
        wn = wc[None] * (1.0 - e)[:, None, :]
        p = (wp.reshape(-1, n) @ s_cat).reshape(n_l, wc.shape[0], n_m, n)
        num = np.einsum("lcmn,lcn->clm", p, wn).astype(np.float64)
        den = (wp.sum(-1, dtype=np.float64) * wn.sum(-1, dtype=np.float64)).T  # (c, L)
        with np.errstate(invalid="ignore", divide="ignore"):
            out[lo : lo + step] = np.where(
                den[:, :, None] > 0, num / np.where(den > 0, den, 1.0)[:, :, None], np.nan
            )
    return out


def percentile_ci(samples: np.ndarray, level: float) -> tuple[np.ndarray, np.ndarray]:
    """Percentile interval over axis 0 ignoring nan replicates: (q_{(1-level)/2}, q_{(1+level)/2})."""
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    lo, hi = np.nanquantile(samples, [(1 - level) / 2, (1 + level) / 2], axis=0)
    return lo, hi
