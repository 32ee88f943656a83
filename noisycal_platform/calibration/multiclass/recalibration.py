"""Post-hoc recalibration of C-class probabilities with corrected one-hot labels (Hanada and Futami 2026 §5 for C
classes).

Targets Ỹ_i ∈ R^C: the combined corrected labels of `corrected` (unbiased for P(Y = · | X), may leave
the simplex), or for the naive baselines the vote shares ("soft_vote") or the majority-vote one-hot with
ties split equally ("majority_vote").

- "temperature" (Guo et al. 2017): q = softmax(θ·z), z = log clip(p, ε, 1 − ε), θ = 1/T, T ∈ [0.01, 100].
  Corrected cross-entropy L(θ) = mean_i[S_i·LSE(θ z_i) − θ Σ_c Ỹ_ic z_ic], S_i = Σ_c Ỹ_ic; it is linear
  in Ỹ, so E[L | X] is the clean cross-entropy (Hanada and Futami 2026 §5.1, §E.1; Patrini et al. 2017). For C = 2 it
  is the binary corrected log loss of σ(θ·logit p). L can be unbounded below in finite samples (§E.2):
  as θ → ∞, L(θ)/θ → g = mean_i[S_i max_c z_ic − Σ_c Ỹ_ic z_ic]; g < 0 raises `UnboundedObjectiveError`
  rather than returning T ≈ 0. The fit minimises over the compact box and records whether a bound is active.
- "histogram" (classwise projected histogram, §5.2 per class): for class c and bin k of p_ic,
  v_kc = clip(mean_{i: bin(p_ic)=k} Ỹ_ic, 0, 1) (the argmin over [0, 1] of the corrected squared loss);
  an empty bin predicts its midpoint. Prediction q_ic = v_{bin(p_ic), c} / Σ_c' v_{bin(p_ic'), c'}
  (rows renormalised; a row of zeros keeps p).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.special import logsumexp, softmax

from ..nc_ece import _check_n_bins, bin_index
from ..recalibration import FittedRecalibration, Recalibrator, UnboundedObjectiveError
from ._patterns import as_class_annotations, class_codes
from .corrected import as_confusion, corrected_onehot
from .nc_ece import check_probs

__all__ = ["MULTICLASS_RECALIBRATION_METHODS", "MulticlassRecalibrator", "fit_multiclass_recalibrator",
           "naive_onehot"]

MULTICLASS_RECALIBRATION_METHODS = ("temperature", "histogram")
NAIVE_TARGETS = ("soft_vote", "majority_vote")
LOG_CLIP = 1e-6
T_BOUNDS = (0.01, 100.0)
_FORMAT = "noisycal.multiclass_recalibrator"


def naive_onehot(annotations: Any, n_classes: int | None = None, rule: str = "majority_vote") -> np.ndarray:
    """(n, C) vote shares ("soft_vote") or majority-vote one-hot with ties split ("majority_vote"); NaN rows
    for unannotated items."""
    if rule not in NAIVE_TARGETS:
        raise ValueError(f"naive target must be one of {NAIVE_TARGETS}, got {rule!r}")
    a, c = as_class_annotations(annotations, n_classes)
    codes = class_codes(a, c)
    votes = np.zeros((a.shape[0], c + 1))
    for j in range(a.shape[1]):  # loop over annotators
        votes[np.arange(a.shape[0]), codes[:, j]] += 1.0
    votes = votes[:, :c]
    tot = votes.sum(axis=1, keepdims=True)
    if rule == "majority_vote":
        votes = (votes == votes.max(axis=1, keepdims=True)).astype(float) * (tot > 0)
        tot = votes.sum(axis=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = votes / tot
    out[tot[:, 0] == 0] = np.nan
    return out


def _log_probs(p: np.ndarray) -> np.ndarray:
    return np.log(np.clip(p, LOG_CLIP, 1.0 - LOG_CLIP))


def _bins(p: np.ndarray, n_bins: int) -> np.ndarray:
    """(n, C) bins of every probability by the project's one bin rule (`bin_index`)."""
    return bin_index(p.ravel(), n_bins).reshape(p.shape)


@dataclass(frozen=True, eq=False)
class MulticlassRecalibrator(FittedRecalibration):
    """A fitted C-class post-hoc map; JSON-able parameters (`to_dict` / `from_dict`).

    method : "temperature" ({"temperature", "clip"}) or "histogram" ({"n_bins", "values" (B lists of C)}).
    diagnostics : loss, at_bound, min_recession_slope (temperature); n_clipped, empty_bins (histogram).
    Other fields: see `FittedRecalibration` (format "noisycal.multiclass_recalibrator", version 1).
    """

    FORMAT = _FORMAT
    KIND = "multi-class recalibrator"
    METHODS = MULTICLASS_RECALIBRATION_METHODS

    def predict(self, probs: Any) -> np.ndarray:
        """Recalibrated (n, C) probabilities."""
        p = check_probs(probs)
        if self.method == "temperature":
            return softmax(_log_probs(p) / float(self.params["temperature"]), axis=1)
        values = np.asarray(self.params["values"], float)  # (B, C)
        if values.shape[1] != p.shape[1]:
            raise ValueError(f"probs has {p.shape[1]} classes but the recalibrator was fitted on {values.shape[1]}")
        q = np.take_along_axis(values, _bins(p, values.shape[0]), axis=0)
        tot = q.sum(axis=1, keepdims=True)
        return np.where(tot > 0, q / np.where(tot > 0, tot, 1.0), p)

    @classmethod
    def _check_params(cls, method: str, params: dict[str, Any]) -> None:
        Recalibrator._check_params(method, params)  # the binary rules: keys present, T > 0, one value row per bin
        if method == "histogram" and np.asarray(params["values"], float).ndim != 2:
            raise ValueError(f"histogram values must be n_bins × C, got shape {np.shape(params['values'])}")


def temperature_loss(theta: float, z: np.ndarray, y: np.ndarray) -> float:
    """Corrected cross-entropy mean_i[S_i·LSE(θ z_i) − θ Σ_c Ỹ_ic z_ic] (see module doc)."""
    return float(np.mean(y.sum(axis=1) * logsumexp(theta * z, axis=1) - theta * (y * z).sum(axis=1)))


def temperature_recession_slope(z: np.ndarray, y: np.ndarray) -> float:
    """lim_{θ→∞} L(θ)/θ = mean_i[S_i max_c z_ic − Σ_c Ỹ_ic z_ic]; negative ⇒ L unbounded below as T → 0."""
    return float(np.mean(y.sum(axis=1) * z.max(axis=1) - (y * z).sum(axis=1)))


def fit_multiclass_recalibrator(
    probs: Any,
    annotations: Any,
    channels: Any = None,
    method: str = "temperature",
    corrected: bool = True,
    n_bins: int = 15,
    weights: Any = "iv",
    prevalence: Any = None,
    naive_target: str = "majority_vote",
) -> MulticlassRecalibrator:
    """Fit corrected-loss temperature scaling or the corrected classwise projected histogram (module doc).

    Raises
    ------
    UnboundedObjectiveError : the corrected cross-entropy decreases without bound as T → 0.
    """
    if method not in MULTICLASS_RECALIBRATION_METHODS:
        raise ValueError(f"method must be one of {MULTICLASS_RECALIBRATION_METHODS}, got {method!r}")
    n_bins = _check_n_bins(n_bins)
    p = check_probs(probs)
    a = np.asarray(annotations)
    if a.ndim == 1:
        a = a[:, None]
    if a.shape[0] != p.shape[0]:
        raise ValueError(f"annotations has {a.shape[0]} rows but probs has {p.shape[0]}")
    c = p.shape[1]
    if corrected:
        if channels is None:
            raise ValueError("channels are required when corrected=True")
        t = as_confusion(channels, a.shape[1], c)
        y = corrected_onehot(a, t, weights=weights, prevalence=prevalence)
        target = "corrected"
    else:
        y = naive_onehot(a, c, naive_target)
        target = naive_target
    keep = ~np.isnan(y).any(axis=1)
    p, y = p[keep], y[keep]
    n = int(keep.sum())
    if n == 0:
        raise ValueError("no annotated item to fit on")
    if method == "histogram":
        b = _bins(p, n_bins)  # (n, C)
        flat = (b * c + np.arange(c)).ravel()
        cnt = np.bincount(flat, minlength=n_bins * c).reshape(n_bins, c)
        tot = np.bincount(flat, weights=y.ravel(), minlength=n_bins * c).reshape(n_bins, c)
        mid = ((np.arange(n_bins) + 0.5) / n_bins)[:, None]
        raw = np.where(cnt > 0, tot / np.maximum(cnt, 1), mid)
        values = np.clip(raw, 0.0, 1.0)
        params = {"n_bins": int(n_bins), "values": values.tolist()}
        diag = {
            "n_clipped": int(np.count_nonzero((raw < 0) | (raw > 1))),
            "empty_bins": [np.flatnonzero(cnt[:, k] == 0).tolist() for k in range(c)],
        }
        return MulticlassRecalibrator("histogram", params, corrected, target, n, True, 0, diag)
    z = _log_probs(p)
    slope = temperature_recession_slope(z, y)
    if slope < -1e-12:
        raise UnboundedObjectiveError(
            f"corrected cross-entropy for temperature scaling is unbounded below as T → 0 (slope {slope:.4g} < 0 "
            f"on n={n} items): the corrected labels are too noisy for this sample. Use more annotated items or "
            "the classwise projected histogram"
        )
    from scipy.optimize import minimize_scalar  # lazy: scipy.optimize is slow to import

    lo, hi = 1.0 / T_BOUNDS[1], 1.0 / T_BOUNDS[0]
    res = minimize_scalar(
        temperature_loss, bounds=(lo, hi), args=(z, y), method="bounded", options={"xatol": 1e-10, "maxiter": 500}
    )
    theta, loss = float(res.x), float(res.fun)
    # a bound is active when the optimiser sits on it or the loss there is no larger (flat towards the edge)
    at_bound = bool(min(abs(theta - lo), abs(theta - hi)) < 1e-6)
    for edge in (hi, lo):
        f_edge = temperature_loss(edge, z, y)
        if f_edge <= loss + 1e-12 * max(1.0, abs(loss)):
            theta, loss, at_bound = edge, f_edge, True
            break
    params = {"temperature": 1.0 / theta, "clip": LOG_CLIP}
    diag = {"loss": loss, "at_bound": at_bound, "min_recession_slope": slope}
    return MulticlassRecalibrator(
        "temperature", params, corrected, target, n, bool(res.success) and not at_bound, int(res.nfev), diag
    )
