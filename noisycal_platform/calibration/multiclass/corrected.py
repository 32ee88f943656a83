"""Corrected one-hot labels for C classes: backward correction and inverse-variance aggregation.

Backward correction (Patrini et al. 2017, "Making deep neural networks robust to label noise: a loss
correction approach", CVPR, Theorem 1): with T_j[y, a] = P(A_j = a | Y = y) invertible, the corrected
one-hot label of annotation A_j = a is

    Ỹ_j = T_j^{-T} e_a,   i.e.  Ỹ_jc = (T_j^{-1})[a, c],     E[Ỹ_j | Y = y] = T_j^{-T} T_j^T e_y = e_y,

so E[Ỹ_jc | X] = P(Y = c | X) under class-conditional noise. For C = 2 the class-1 entry is
(A_j − a_j)/δ_j (Hanada and Futami 2026 §3). Per class c the annotators are combined with inverse
corrected-noise-variance
weights (Hanada and Futami 2026 §4.4 applied to the class-c indicator):

    v̄_jc = E[Var(Ỹ_jc | Y)] = Σ_y π_y Σ_a T_j[y, a] (T_j^{-1})[a, c]² − π_c,     w_jc ∝ 1/v̄_jc,

renormalised over the annotators present on each item: Ỹ_ic = Σ_{j∈J_i} w_jc Ỹ_ijc / Σ_{j∈J_i} w_jc.
Annotators with v̄_jc = 0 share all the weight of class c (Hanada and Futami 2026 §C.6). For C = 2 both classes get the
binary weights. The plug-in prevalence is the mean of the equally weighted corrected labels, clipped to
[1e-4, 1 − 1e-4] per class (Hanada and Futami 2026 §F.4).

Minimum-variance unbiased pattern targets ("mvu"). Any function f of the answer pattern with
E[f | Y = y] = 1{y = c} for every y is unbiased for P(Y = c | X) under class-conditional, conditionally independent
noise; the weighted averages above are some of them. With L_p(y) = Π_{j present in p} T_j[y, a_pj] the pattern's
likelihood and q a probability vector standing in for P(Y | X) (a function of the scores only, so unbiasedness does
not depend on it), the one of least E_q[f²] among all functions of the patterns of one presence set is

    f_p = Σ_y λ_y L_p(y) / d_p,   d_p = Σ_y q_y L_p(y),   A λ = e_c,   A = Σ_p L_p L_pᵀ / d_p

(a Lagrange solution: f is the posterior P_q(Y | p) mapped linearly, f_p = Σ_y (λ_y/q_y) P_q(y | p)). With one
annotator it is the backward correction (C patterns, C constraints). It needs the joint answer model (annotators
independent given Y), where the weighted averages need only each T_j. `mvu_pattern_targets` evaluates it per score
cell (bin) with q the cell's mean predicted probability vector.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._patterns import as_class_annotations, class_codes
from .dawid_skene import ConfusionFit, validate_confusion

__all__ = [
    "MULTICLASS_WEIGHT_RULES",
    "PREVALENCE_CLIP",
    "VAR_ZERO",
    "as_confusion",
    "backward_matrices",
    "class_weights",
    "corrected_noise_variance",
    "corrected_onehot",
    "iv_weights",
    "mvu_pattern_targets",
    "pattern_likelihoods",
    "pattern_targets",
    "plugin_prevalence",
]

MULTICLASS_WEIGHT_RULES = ("iv", "equal")
MVU = "mvu"  # the minimum-variance unbiased pattern targets (module doc); not a per-annotator weight rule
Q_FLOOR = 1e-6  # q is floored at this (then renormalised) so that every possible pattern has d_p > 0
PREVALENCE_CLIP = 1e-4
VAR_ZERO = 1e-12


def as_confusion(channels: Any, n_annotators: int | None = None, n_classes: int | None = None) -> np.ndarray:
    """(K, C, C) confusion matrices from a `ConfusionFit`, a binary `ChannelFit`/channels (C = 2) or an array."""
    if isinstance(channels, ConfusionFit):
        return validate_confusion(channels.confusion, n_annotators, n_classes)
    from ..channels.known import as_channels

    try:
        arr = np.asarray(channels, dtype=np.float64)
    except (TypeError, ValueError):
        arr = None
    if arr is None or arr.ndim != 3:
        chans = as_channels(channels, n_annotators)
        arr = np.array([[[1 - ch.fpr, ch.fpr], [ch.fnr, 1 - ch.fnr]] for ch in chans])
    return validate_confusion(arr, n_annotators, n_classes)


def backward_matrices(confusion: Any) -> np.ndarray:
    """(K, C, C) inverses T_j^{-1}; row a of T_j^{-1} is the corrected one-hot label of answer a."""
    return np.linalg.inv(validate_confusion(confusion))


def corrected_noise_variance(confusion: Any, prevalence: Any) -> np.ndarray:
    """(K, C) v̄_jc = Σ_y π_y Σ_a T_j[y, a] (T_j^{-1})[a, c]² − π_c (see module doc)."""
    t = validate_confusion(confusion)
    return _noise_variance(t, _check_prevalence(prevalence, t.shape[1]))


def _check_prevalence(prevalence: Any, c: int) -> np.ndarray:
    pi = np.asarray(prevalence, dtype=np.float64)
    if pi.shape != (c,) or not np.all(np.isfinite(pi)) or pi.min() < 0:
        raise ValueError(f"prevalence must be {c} finite values >= 0, got {pi.tolist()}")
    return pi


def _noise_variance(t: np.ndarray, pi: np.ndarray) -> np.ndarray:
    """v̄ (..., K, C) for confusion (..., K, C, C) and prevalence (..., C); leading axes are replicates."""
    return np.einsum("...y,...jya,...jac->...jc", pi, t, np.linalg.inv(t) ** 2) - pi[..., None, :]


def iv_weights(t: np.ndarray, pi: np.ndarray) -> np.ndarray:
    """(..., K, C) inverse-variance weights w_jc ∝ 1/v̄_jc, each class summing to 1 over the annotators;
    where some v̄_jc = 0 those annotators share class c (Hanada and Futami 2026 §C.6). Leading axes are replicates."""
    v = _noise_variance(t, pi)
    zero = v <= VAR_ZERO
    w = np.where(zero.any(axis=-2, keepdims=True), zero.astype(float), 1.0 / np.where(zero, 1.0, v))
    return w / w.sum(axis=-2, keepdims=True)


def class_weights(confusion: Any, prevalence: Any = None, rule: Any = "iv") -> np.ndarray:
    """(K, C) annotator weights per class, each column summing to 1: "iv", "equal" or an explicit array.

    An explicit array may be (K,) (the same weights for every class) or (K, C).
    """
    t = validate_confusion(confusion)
    k, c, _ = t.shape
    if isinstance(rule, str):
        if rule not in MULTICLASS_WEIGHT_RULES:
            raise ValueError(f"weights must be one of {MULTICLASS_WEIGHT_RULES} or an array, got {rule!r}")
        if rule == "equal":
            w = np.ones((k, c))
        else:
            if prevalence is None:
                raise ValueError("prevalence is required for weights='iv' (got None)")
            return iv_weights(t, _check_prevalence(prevalence, c))
    else:
        w = np.asarray(rule, dtype=np.float64)
        if w.shape == (k,):
            w = np.repeat(w[:, None], c, axis=1)
        if w.shape != (k, c):
            raise ValueError(f"weights must have shape ({k},) or ({k}, {c}), got {w.shape}")
        if not np.all(np.isfinite(w)) or np.any(w < 0) or np.any(w.sum(axis=0) <= 0):
            raise ValueError("weights must be finite, >= 0 and not all zero for any class")
    return w / w.sum(axis=0)


def pattern_targets(tinv: np.ndarray, w: np.ndarray, labels: np.ndarray, present: np.ndarray):
    """Combined corrected label of every answer pattern and its inclusion mask, each (..., P, C):

    Ỹ_pc = Σ_{j present in p} w_jc (T_j^{-1})[a_pj, c] / Σ_{j present in p} w_jc (see module doc), 0 where the
    pattern is excluded (nobody answered, or the annotators present all have weight 0 for class c).
    tinv : (..., K, C, C) inverses; w : (..., K, C) weights; labels, present : (P, K) answers and presence.
    Leading axes are replicates; they broadcast, so inverses held fixed can be passed once as (K, C, C).
    The sums over annotators run j = 0, 1, ..., K − 1, the order of numpy's reduction over that axis of a
    (..., P, K, C) array (tests/unit/calibration/multiclass/test_corrected_nc_ece.py compares the two).
    """
    lab = np.where(present, labels, 0)
    num = den = None
    for j in range(labels.shape[1]):  # loop over annotators (K small), each vectorised over replicates, patterns
        wj = present[:, j, None] * w[..., j, None, :]  # (..., P, C): w_jc where j answered pattern p
        yj = tinv[..., j, lab[:, j], :] * wj  # (..., P, C): w_jc (T_j^{-1})[a_pj, c]
        num, den = (yj, wj) if num is None else (num + yj, den + wj)
    inc = present.any(axis=1)[:, None] & (den > 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        y = np.where(inc, num / den, 0.0)
    return y, inc


def pattern_likelihoods(confusion: np.ndarray, labels: np.ndarray, present: np.ndarray) -> np.ndarray:
    """(..., C, P) L_p(y) = Π_{j present in p} T_j[y, a_pj] for confusion (..., K, C, C); labels, present (P, K)."""
    lab = np.where(present, labels, 0)
    out = None
    for j in range(labels.shape[1]):  # loop over annotators (K small), each vectorised over replicates, patterns
        tj = np.where(present[:, j], confusion[..., j, :, :][..., lab[:, j]], 1.0)  # (..., C, P)
        out = tj if out is None else out * tj
    return out


def mvu_pattern_targets(confusion: np.ndarray, q: np.ndarray, target: np.ndarray, labels: np.ndarray,
                        present: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Minimum-variance unbiased targets (module doc) per score cell and pattern, and the inclusion mask.

    confusion : (..., K, C, C) (leading axes are replicates); q : (S, C) probability vectors of the S score cells;
    target : (S,) the class each cell's target indicates; labels, present : (P, K) answers and presence.
    Returns f (..., S, P) with E[f_{s,·} | Y = y] = 1{y = target_s} for every presence set, and inc (P,) (False
    where nobody answered; f is 0 there).
    """
    q = np.maximum(np.asarray(q, np.float64), Q_FLOOR)
    q = q / q.sum(axis=1, keepdims=True)
    lik = pattern_likelihoods(confusion, labels, present)  # (..., C, P)
    c = lik.shape[-2]
    lead = lik.shape[:-2]
    # d (..., S, P) = Σ_y q_sy L_p(y): one matrix product over all replicates and patterns
    d = np.moveaxis((q @ np.moveaxis(lik, -2, 0).reshape(c, -1)).reshape(q.shape[0], *lead, -1), 0, -2)
    inv_d = np.divide(1.0, d, out=np.zeros_like(d), where=d > 0)  # d = 0: a pattern impossible under every y
    outer = (lik[..., :, None, :] * lik[..., None, :, :]).reshape(*lead, c * c, -1)  # (..., C², P)
    mask = present @ (1 << np.arange(present.shape[1]))
    e = np.eye(c)[np.asarray(target)]  # (S, C)
    f = np.zeros(d.shape)
    for m in np.unique(mask[mask > 0]):  # loop over presence sets (at most 2^K), each vectorised
        cols = np.flatnonzero(mask == m)
        a = inv_d[..., cols] @ np.swapaxes(outer[..., cols], -1, -2)  # (..., S, C²): A per cell, symmetric
        a = a.reshape(*a.shape[:-1], c, c)
        lam = np.linalg.solve(a, np.broadcast_to(e, a.shape[:-1])[..., None])[..., 0]  # (..., S, C)
        f[..., cols] = (lam @ lik[..., cols]) * inv_d[..., cols]
    return f, mask > 0


def _present_codes(annotations: Any, n_classes: int) -> tuple[np.ndarray, np.ndarray]:
    a, _ = as_class_annotations(annotations, n_classes)
    codes = class_codes(a, n_classes)
    return codes, codes < n_classes


def corrected_onehot(annotations: Any, channels: Any, weights: Any = "iv", prevalence: Any = None) -> np.ndarray:
    """(n, C) combined corrected labels Ỹ_ic (see module doc); NaN rows where nobody labelled item i.

    channels : a `ConfusionFit`, (K, C, C) matrices, or binary channels (C = 2).
    weights : "iv" (prevalence None → plug-in), "equal", or a (K,) / (K, C) array.
    """
    a = np.asarray(annotations)
    if a.ndim == 1:
        a = a[:, None]
    t = as_confusion(channels, a.shape[1])
    c = t.shape[1]
    codes, present = _present_codes(a, c)
    if isinstance(weights, str) and weights == "iv" and prevalence is None:
        prevalence = plugin_prevalence(a, t)
    w = class_weights(t, prevalence, weights)
    tinv = np.linalg.inv(t)
    num = np.zeros((a.shape[0], c))
    den = np.zeros((a.shape[0], c))
    for j in range(a.shape[1]):  # loop over annotators, not items
        pj = present[:, j]
        rows = tinv[j][np.where(pj, codes[:, j], 0)]  # (n, C) corrected one-hot of each answer
        num += np.where(pj[:, None], rows * w[j], 0.0)
        den += pj[:, None] * w[j]
    with np.errstate(invalid="ignore", divide="ignore"):
        out = num / den
    out[~present.any(axis=1)] = np.nan
    return out


def plugin_prevalence(annotations: Any, channels: Any) -> np.ndarray:
    """(C,) mean of the equally weighted corrected labels over annotated items, clipped to [1e-4, 1 − 1e-4]."""
    y = corrected_onehot(annotations, channels, weights="equal")
    y = y[~np.isnan(y[:, 0])]
    if y.shape[0] == 0:
        raise ValueError("annotations has no labelled item")
    return np.clip(y.mean(axis=0), PREVALENCE_CLIP, 1 - PREVALENCE_CLIP)
