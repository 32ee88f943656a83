"""Ranking metrics shared by cleaning and correctness (Gröger et al. 2023 §4.3, Table 2-3).

All three metrics are higher-is-better: ``auroc`` (0.5 = random), ``average_precision`` (baseline =
positive rate) and ``auprg`` (0 = the always-positive baseline, 1 = perfect). Each returns nan with an
``UndefinedMetricWarning`` when ``y_true`` holds only one class, the scikit-learn contract.

AUROC and AP come from scikit-learn (imported lazily: it is slow to import and this module is loaded by
the Dagster code location). AUPRG (Flach & Kull 2015, "Precision-Recall-Gain curves: PR
analysis done right", NeurIPS) is hand-written: no maintained library implements it.

``bootstrap_ranking_metrics`` evaluates all three on many bootstrap replicates at once: a replicate is
a vector of multinomial counts, and the metrics are computed from count-weighted cumulative TP/FP
curves over the tie groups of the scores (one sort for all replicates).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np
from scipy import sparse

__all__ = [
    "METRICS",
    "auprg",
    "auroc",
    "average_precision",
    "bootstrap_counts",
    "bootstrap_ranking_metrics",
    "curve_metrics",
    "tie_groups",
]

METRICS = ("auroc", "ap", "auprg")


def _validate(y_true, y_score, sample_weight) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    y = np.asarray(y_true)
    s = np.asarray(y_score, dtype=float)
    if y.ndim != 1 or s.ndim != 1 or y.shape != s.shape:
        raise ValueError(
            f"y_true and y_score must be 1-D of equal length, got shapes {y.shape} and {s.shape}"
        )
    if y.size == 0:
        raise ValueError("y_true must not be empty, got 0 samples")
    if y.dtype == bool:
        y = y.astype(np.int8)
    bad = ~np.isin(y, (0, 1))
    if bad.any():
        raise ValueError(f"y_true must hold only 0/1, got {y[bad][:5].tolist()}")
    if not np.isfinite(s).all():
        raise ValueError(f"y_score must be finite, got {s[~np.isfinite(s)][:5].tolist()}")
    w = None
    if sample_weight is not None:
        w = np.asarray(sample_weight, dtype=float)
        if w.shape != s.shape or (w < 0).any() or not np.isfinite(w).all():
            raise ValueError(f"sample_weight must be finite, >= 0 and of shape {s.shape}, got {w.shape}")
    return y.astype(np.int8), s, w


def _one_class(y: np.ndarray, w: np.ndarray | None, name: str) -> bool:
    wt = np.ones_like(y, dtype=float) if w is None else w
    pos, neg = float(wt[y == 1].sum()), float(wt[y == 0].sum())
    if pos > 0 and neg > 0:
        return False
    from sklearn.exceptions import UndefinedMetricWarning  # lazy: sklearn import is slow (definitions.py)

    warnings.warn(
        f"Only one class is present in y_true; {name} is not defined in that case (returning nan).",
        UndefinedMetricWarning,
        stacklevel=3,
    )
    return True


def auroc(y_true, y_score, sample_weight=None) -> float:
    """Area under the ROC curve = P(s⁺ > s⁻) + ½ P(s⁺ = s⁻) (scikit-learn ``roc_auc_score``)."""
    y, s, w = _validate(y_true, y_score, sample_weight)
    if _one_class(y, w, "AUROC"):
        return float("nan")
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(y, s, sample_weight=w))


def average_precision(y_true, y_score, sample_weight=None) -> float:
    """AP = Σ_k (R_k − R_{k−1}) P_k over descending thresholds (scikit-learn, no interpolation)."""
    y, s, w = _validate(y_true, y_score, sample_weight)
    if _one_class(y, w, "average precision"):
        return float("nan")
    from sklearn.metrics import average_precision_score

    return float(average_precision_score(y, s, sample_weight=w))


def auprg(y_true, y_score, sample_weight=None, *, unit_square: bool = True) -> float:
    """Area under the precision-recall-gain curve (Flach & Kull 2015).

    With π = P/(P+N): precG = 1 − (P/N)·FP/TP, recG = 1 − (P/N)·FN/TP. The curve joins the operating
    points (tied scores form one point) by straight lines in PRG space and starts at recG = 0, where
    the point is interpolated linearly in contingency space (TP = P²/(P+N)), as in the authors'
    reference code. AUPRG = ∫₀¹ precG d recG. With ``unit_square=True`` (default) only the part with
    precG ≥ 0 counts (the curve inside the unit square; ≈ 0 for rankings no better than the
    always-positive baseline); ``unit_square=False`` keeps negative precision gains, like the
    reference package's ``calc_auprg``.
    """
    y, s, w = _validate(y_true, y_score, sample_weight)
    if _one_class(y, w, "AUPRG"):
        return float("nan")
    pos, neg = tie_groups(y, s, w)
    return float(curve_metrics(pos, neg, unit_square=unit_square)["auprg"])


def tie_groups(y: np.ndarray, s: np.ndarray, w: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per tie group of ``s`` in descending order: (positive weight, negative weight)."""
    order = np.argsort(-s, kind="stable")
    ss = s[order]
    starts = np.flatnonzero(np.r_[True, ss[1:] != ss[:-1]])
    wt = np.ones(s.shape, dtype=float) if w is None else w
    yo, wo = y[order], wt[order]
    pos = np.add.reduceat(wo * (yo == 1), starts)
    neg = np.add.reduceat(wo * (yo == 0), starts)
    return pos, neg


def _group_index(s: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    order = np.argsort(-s, kind="stable")
    ss = s[order]
    new = np.r_[True, ss[1:] != ss[:-1]]
    gid_sorted = np.cumsum(new) - 1
    gid = np.empty_like(gid_sorted)
    gid[order] = gid_sorted
    return gid, order, int(gid_sorted[-1]) + 1


def curve_metrics(pos: np.ndarray, neg: np.ndarray, *, unit_square: bool = True) -> dict[str, np.ndarray]:
    """AUROC, AP and AUPRG from per-group weights in descending score order.

    ``pos``/``neg`` have shape (..., G); the leading axes are independent replicates (vectorised).
    AUROC = Σ_g neg_g·(TP_{g−1} + pos_g/2) / (P·N); AP = Σ_g (pos_g/P)·TP_g/(TP_g+FP_g);
    AUPRG as in :func:`auprg`. Entries with a missing class are nan.
    """
    pos = np.asarray(pos, dtype=float)
    neg = np.asarray(neg, dtype=float)
    tp = np.cumsum(pos, axis=-1)
    fp = np.cumsum(neg, axis=-1)
    P = tp[..., -1]
    N = fp[..., -1]
    valid = (P > 0) & (N > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        tp_prev = tp - pos
        roc = (neg * (tp_prev + 0.5 * pos)).sum(axis=-1) / (P * N)
        prec = np.where(tp + fp > 0, tp / np.where(tp + fp > 0, tp + fp, 1.0), 0.0)
        ap = (pos * prec).sum(axis=-1) / P
        prg = _auprg_curve(tp, fp, P, N, unit_square)
    nan = np.nan
    return {
        "auroc": np.where(valid, roc, nan),
        "ap": np.where(valid, ap, nan),
        "auprg": np.where(valid, prg, nan),
    }


def _auprg_curve(tp, fp, P, N, unit_square: bool) -> np.ndarray:
    """Vectorised AUPRG over the leading axes (see :func:`auprg`)."""
    zeros = np.zeros((*tp.shape[:-1], 1))
    TP = np.concatenate([zeros, tp], axis=-1)  # operating points incl. the empty prediction
    FP = np.concatenate([zeros, fp], axis=-1)
    Pk, Nk = P[..., None], N[..., None]
    ratio = Pk / Nk
    tp_safe = np.where(TP > 0, TP, 1.0)
    rg = np.where(TP > 0, 1.0 - ratio * (Pk - TP) / tp_safe, -np.inf)
    pg = np.where(TP > 0, 1.0 - ratio * FP / tp_safe, -np.inf)
    x0, x1 = rg[..., :-1], rg[..., 1:]
    y0, y1 = pg[..., :-1], pg[..., 1:]
    # The segment that crosses recG = 0: replace its left end by the crossing point, interpolated in
    # contingency space at TP* = P²/(P+N) (recG is monotone in TP, so there is exactly one).
    cross = (x0 < 0) & (x1 > 0)
    dtp = TP[..., 1:] - TP[..., :-1]
    dfp = FP[..., 1:] - FP[..., :-1]
    tp_star = Pk * Pk / (Pk + Nk)
    alpha = np.where(dtp > 0, (tp_star - TP[..., :-1]) / np.where(dtp > 0, dtp, 1.0), 0.5)
    fp_star = FP[..., :-1] + alpha * dfp
    pg_star = 1.0 - ratio * fp_star / tp_star
    x0 = np.where(cross, 0.0, x0)
    y0 = np.where(cross, pg_star, y0)
    use = x0 >= 0
    width = np.where(use, x1 - x0, 0.0)
    y0 = np.where(use, y0, 0.0)
    y1 = np.where(use, y1, 0.0)
    if not unit_square:
        return (width * (y0 + y1) / 2).sum(axis=-1)
    # Positive part of a straight line between (x0, y0) and (x1, y1).
    both = (y0 >= 0) & (y1 >= 0)
    denom = np.where(y0 != y1, np.abs(y0 - y1), 1.0)
    tri = np.where(y0 > 0, y0 * y0, 0.0) + np.where(y1 > 0, y1 * y1, 0.0)
    part = np.where((y0 > 0) | (y1 > 0), width * tri / (2 * denom), 0.0)
    area = np.where(both, width * (y0 + y1) / 2, part)
    return area.sum(axis=-1)


def bootstrap_counts(n: int, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """(n_boot, n) multinomial counts of ``n`` draws with replacement (one bootstrap replicate per row)."""
    if n <= 0 or n_boot <= 0:
        raise ValueError(f"n and n_boot must be > 0, got n={n}, n_boot={n_boot}")
    idx = rng.integers(0, n, size=(n_boot, n))
    flat = (idx + (np.arange(n_boot)[:, None] * n)).ravel()
    return np.bincount(flat, minlength=n_boot * n).reshape(n_boot, n).astype(np.float64)


def bootstrap_ranking_metrics(
    y_true,
    y_score,
    *,
    n_boot: int = 1000,
    seed: int | np.random.Generator = 0,
    masks: Sequence[np.ndarray] | None = None,
    unit_square: bool = True,
    chunk: int = 250,
) -> dict[str, np.ndarray]:
    """AUROC/AP/AUPRG on ``n_boot`` bootstrap resamples of the items (percentile bootstrap input).

    Returns arrays of shape (n_masks, n_boot) per metric. With ``masks`` (boolean item subsets, e.g.
    all items and the items kept after cleaning) every subset is evaluated on the *same* resample,
    which makes differences between subsets paired (Gröger et al. 2023 Table 2). Replicates with a missing
    class are nan.
    """
    y, s, _ = _validate(y_true, y_score, None)
    if n_boot < 1:
        raise ValueError(f"n_boot must be >= 1, got {n_boot}")
    ms = [np.ones(y.shape, bool)] if masks is None else [np.asarray(m, bool) for m in masks]
    for i, m in enumerate(ms):
        if m.shape != y.shape:
            raise ValueError(f"masks[{i}] must have shape {y.shape}, got {m.shape}")
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    gid, _, G = _group_index(s)
    rows = np.arange(y.size)
    onehot_pos = sparse.csr_matrix(((y == 1).astype(float), (rows, gid)), shape=(y.size, G))
    onehot_neg = sparse.csr_matrix(((y == 0).astype(float), (rows, gid)), shape=(y.size, G))
    out = {k: np.empty((len(ms), n_boot)) for k in METRICS}
    n = y.size
    chunk = max(1, min(chunk, 5_000_000 // n))  # bound the (chunk, n) work arrays to ~40 MB each
    for start in range(0, n_boot, chunk):
        b = min(chunk, n_boot - start)
        w = bootstrap_counts(n, b, rng)
        for mi, m in enumerate(ms):
            wm = w * m
            pos = np.asarray((onehot_pos.T @ wm.T).T)  # per-group sums for all replicates at once
            neg = np.asarray((onehot_neg.T @ wm.T).T)
            res = curve_metrics(pos, neg, unit_square=unit_square)
            for k in METRICS:
                out[k][mi, start : start + b] = res[k]
    return out
