"""Post-hoc recalibration with corrected labels (Hanada and Futami 2026 §5, §E.1–E.3).

Targets (per annotated item): corrected Ỹ_i = Σ_{j∈J_i} w_j (A_ij − a_j)/δ_j / Σ_{j∈J_i} w_j (unbiased for
η, may leave [0, 1]); or, for the naive baselines (``corrected=False``), the soft vote (mean of the labels
present) or the majority vote (ties → 0.5).

- "platt": p = σ(α·z + β), z = logit(clip(s, ε, 1 − ε)); minimises the corrected log loss
  mean_i[log(1 + e^{t_i}) − Ỹ_i t_i] over the compact box α, β ∈ [−20, 20] (§5.1, §E.2).
- "temperature": p = σ(z/T) over the compact set T ∈ [0.25, 20], same loss (convex in θ = 1/T).
- "histogram": projected histogram p_k = clip(mean_{i∈k} Ỹ_i, 0, 1) with bin(s) = min(floor(s·B), B−1)
  (§5.2); an empty bin predicts its midpoint (k + 0.5)/B.

The corrected log loss is convex for every real Ỹ but can be unbounded below in finite samples (§E.2):
along a direction d of the parameters its recession slope is g(d) = mean_i[(d·x_i)⁺ − Ỹ_i (d·x_i)]
(x_i = (z_i, 1) for Platt, z_i for temperature with T → 0). The seed's remedy (§E.2) is a compact parameter
set: the loss is always minimised inside the box, and ``diagnostics`` records ``unbounded`` (some g(d) < 0, so
the unconstrained minimiser does not exist) and ``at_bound`` (the optimum lies on the box boundary). T never
goes below 0.25.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self

import numpy as np
from scipy.special import expit, log_expit

from .channels._base import as_annotation_array
from .channels.known import as_channels
from .nc_ece import _check_n_bins, _check_scores, bin_index, corrected_labels, plugin_prevalence
from .weights import resolve_weights

__all__ = [
    "RECALIBRATION_METHODS",
    "FittedRecalibration",
    "Recalibrator",
    "UnboundedObjectiveError",
    "fit_recalibrator",
    "naive_targets",
    "recession_slope_min",
]

RECALIBRATION_METHODS = ("platt", "temperature", "histogram")
NAIVE_TARGETS = ("soft_vote", "majority_vote")
LOGIT_CLIP = 1e-6
PLATT_BOUND = 20.0
T_BOUNDS = (0.25, 20.0)  # compact temperature set (Hanada and Futami 2026 §E.2); T ≈ 0 is excluded
_FORMAT = "noisycal.recalibrator"


class UnboundedObjectiveError(ValueError):
    """The corrected empirical log loss has no minimiser. Kept for callers; `fit_recalibrator` now minimises
    inside the compact parameter set instead of raising it."""


def _logit(s: np.ndarray, clip: float) -> np.ndarray:
    p = np.clip(s, clip, 1.0 - clip)
    return np.log(p) - np.log1p(-p)


def naive_targets(annotations: Any, rule: str = "soft_vote") -> np.ndarray:
    """Soft vote (mean of present labels) or majority vote (ties 0.5); NaN for unannotated items."""
    if rule not in NAIVE_TARGETS:
        raise ValueError(f"naive target must be one of {NAIVE_TARGETS}, got {rule!r}")
    a = as_annotation_array(annotations)
    x = a.astype(np.float64)
    if np.issubdtype(a.dtype, np.integer):
        x[a < 0] = np.nan
    present = ~np.isnan(x)
    cnt = present.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        soft = np.where(present, x, 0.0).sum(axis=1) / cnt
    soft[cnt == 0] = np.nan
    if rule == "soft_vote":
        return soft
    return np.where(soft > 0.5, 1.0, np.where(soft < 0.5, 0.0, np.where(np.isnan(soft), np.nan, 0.5)))


def recession_slope_min(features: np.ndarray, targets: np.ndarray) -> tuple[float, np.ndarray]:
    """min over unit directions d of g(d) = mean[(d·x)⁺ − y (d·x)] for x = (z, 1) (Platt) or x = z (1-D).

    1-D: only d = +1 (θ → +∞, i.e. T → 0). 2-D: g at d = (0, ±1) and at every breakpoint of
    c ↦ g(±1, c), found exactly with sorted suffix sums in O(n log n). g is linear on each cone between
    breakpoints, so its sign is decided there; when the minimum is ≥ 0 it is exact. Returns (min slope,
    unit direction).
    """
    y = targets
    if features.ndim == 1:
        z = features
        return float(np.mean(np.maximum(z, 0.0) - y * z)), np.array([1.0])
    z = features[:, 0]
    n = len(z)
    best = (float(1.0 - y.mean()), np.array([0.0, 1.0]))
    cand = float(y.mean())
    if cand < best[0]:
        best = (cand, np.array([0.0, -1.0]))
    for sign in (1.0, -1.0):
        u = sign * z
        order = np.argsort(u)
        us = u[order]
        suffix = np.cumsum(us[::-1])[::-1]  # Σ_{i≥m} u_(i)
        m = np.arange(n)
        c = -us  # breakpoints
        pos = suffix - (n - m) * us  # Σ_i (u_i + c)⁺ at c = −u_(m)
        h = (pos - (y @ u) - c * y.sum()) / n / np.sqrt(1.0 + c * c)  # g at the unit vector of (±1, c)
        i = int(np.argmin(h))
        if h[i] < best[0]:
            d = np.array([sign, c[i]])
            best = (float(h[i]), d / np.linalg.norm(d))
    return best


@dataclass(frozen=True, eq=False)
class FittedRecalibration:
    """Fields and JSON round trip shared by the binary and the C-class recalibrators.

    method : a name in the subclass's `METHODS`. params : JSON-able parameters of the map.
    corrected : fitted to corrected labels (True) or to a naive target (False).
    target : "corrected", "soft_vote" or "majority_vote".
    n_fit : items used. converged : optimiser converged inside the box (histogram: True).
    n_iter : optimiser iterations. diagnostics : JSON-able extras (loss, at_bound, min recession slope).
    Subclasses set `FORMAT`, `KIND`, `METHODS` and check their parameters in `_check_params`.
    """

    FORMAT: ClassVar[str] = ""
    KIND: ClassVar[str] = ""
    METHODS: ClassVar[tuple[str, ...]] = ()

    method: str
    params: dict[str, Any]
    corrected: bool
    target: str
    n_fit: int
    converged: bool
    n_iter: int = 0
    diagnostics: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able description: format, version 1, then every field in order."""
        return {
            "format": self.FORMAT,
            "version": 1,
            "method": self.method,
            "params": _jsonable(self.params),
            "corrected": bool(self.corrected),
            "target": self.target,
            "n_fit": int(self.n_fit),
            "converged": bool(self.converged),
            "n_iter": int(self.n_iter),
            "diagnostics": _jsonable(self.diagnostics),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Self:
        """Inverse of `to_dict`; validates the format and the parameters."""
        if not isinstance(d, dict) or d.get("format") != cls.FORMAT or d.get("version") != 1:
            raise ValueError(f"not a noisycal {cls.KIND} dict (format/version): {str(d)[:120]!r}")
        method = d.get("method")
        if method not in cls.METHODS:
            raise ValueError(f"method must be one of {cls.METHODS}, got {method!r}")
        params = dict(d["params"])
        cls._check_params(method, params)
        return cls(
            method,
            params,
            bool(d["corrected"]),
            str(d["target"]),
            int(d["n_fit"]),
            bool(d["converged"]),
            int(d.get("n_iter", 0)),
            dict(d.get("diagnostics", {})),
        )

    @classmethod
    def _check_params(cls, method: str, params: dict[str, Any]) -> None:
        """Raise ValueError when `params` cannot describe a `method` map."""


@dataclass(frozen=True, eq=False)
class Recalibrator(FittedRecalibration):
    """A fitted post-hoc map for binary scores; parameters are JSON-able (`to_dict` / `from_dict`), never pickled.

    method : "platt" | "temperature" | "histogram".
    params : platt {"alpha", "beta", "clip"}; temperature {"temperature", "clip"};
        histogram {"n_bins", "values" (list, one per bin), "empty_bins" (list of bin indices)}.
    Other fields: see `FittedRecalibration`.
    """

    FORMAT = _FORMAT
    KIND = "recalibrator"
    METHODS = RECALIBRATION_METHODS

    def predict(self, scores: Any) -> np.ndarray:
        """Recalibrated probabilities for scores in [0, 1]."""
        s = _check_scores(scores)
        if self.method == "histogram":
            values = np.asarray(self.params["values"], float)
            return values[bin_index(s, int(self.params["n_bins"]))]
        z = _logit(s.astype(np.float64), float(self.params["clip"]))
        if self.method == "platt":
            return expit(float(self.params["alpha"]) * z + float(self.params["beta"]))
        return expit(z / float(self.params["temperature"]))

    @classmethod
    def _check_params(cls, method: str, params: dict[str, Any]) -> None:
        need = {
            "platt": ("alpha", "beta", "clip"),
            "temperature": ("temperature", "clip"),
            "histogram": ("n_bins", "values"),
        }[method]
        for key in need:
            if key not in params:
                raise ValueError(f"params of a {method} recalibrator need {key!r}, got {sorted(params)}")
        if method == "histogram" and len(params["values"]) != int(params["n_bins"]):
            raise ValueError(f"histogram values has {len(params['values'])} entries, n_bins={params['n_bins']}")
        if method == "temperature" and not float(params["temperature"]) > 0:
            raise ValueError(f"temperature must be > 0, got {params['temperature']!r}")


def _jsonable(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple, np.ndarray)):
        return [_jsonable(v) for v in x]
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        v = float(x)
        return v if math.isfinite(v) else None
    return x


def _loss_grad(theta: np.ndarray, x: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
    t = x @ theta
    loss = float(np.mean(-log_expit(-t) - y * t))  # log(1 + e^t) − y t
    grad = x.T @ (expit(t) - y) / len(y)
    return loss, grad


def fit_recalibrator(
    scores: Any,
    annotations: Any,
    channels: Any = None,
    method: str = "platt",
    corrected: bool = True,
    n_bins: int = 15,
    weights: Any = "iv",
    prevalence: float | None = None,
    naive_target: str = "soft_vote",
) -> Recalibrator:
    """Fit a recalibration map to corrected labels (or to a naive target) (Hanada and Futami 2026 §5.1, §5.2, §E.2).

    Parameters
    ----------
    scores : (n,) in [0, 1]. annotations : (n, K), NaN (float) or −1 (int) = missing.
    channels : K channels (required when ``corrected``). method : "platt", "temperature", "histogram".
    corrected : True → corrected labels; False → ``naive_target`` ("soft_vote" or "majority_vote").
    n_bins : bins of the histogram method. weights, prevalence : aggregation as in `nc_ece`.

    A corrected loss that is unbounded below is minimised inside the compact box (§E.2); the result's
    ``diagnostics["unbounded"]`` and ``["at_bound"]`` say so and ``converged`` is False at a bound.
    """
    if method not in RECALIBRATION_METHODS:
        raise ValueError(f"method must be one of {RECALIBRATION_METHODS}, got {method!r}")
    n_bins = _check_n_bins(n_bins)
    s = _check_scores(scores).astype(np.float64)
    a = as_annotation_array(annotations)
    if a.shape[0] != s.size:
        raise ValueError(f"annotations has {a.shape[0]} rows but scores has {s.size}")
    if corrected:
        if channels is None:
            raise ValueError("channels are required when corrected=True")
        chans = as_channels(channels, a.shape[1])
        if isinstance(weights, str) and weights == "iv" and prevalence is None:
            prevalence = plugin_prevalence(a, chans)
        w = resolve_weights(weights, chans, prevalence)
        y = corrected_labels(a, chans, w)
        target = "corrected"
    else:
        y = naive_targets(a, naive_target)
        target = naive_target
    keep = ~np.isnan(y)
    s, y = s[keep], y[keep]
    n = int(keep.sum())
    if n == 0:
        raise ValueError("no annotated item to fit on")
    if method == "histogram":
        b = bin_index(s, n_bins)
        cnt = np.bincount(b, minlength=n_bins)
        tot = np.bincount(b, weights=y, minlength=n_bins)
        mid = (np.arange(n_bins) + 0.5) / n_bins
        with np.errstate(invalid="ignore", divide="ignore"):
            raw = np.where(cnt > 0, tot / np.maximum(cnt, 1), mid)
        values = np.clip(raw, 0.0, 1.0)
        params = {
            "n_bins": n_bins,
            "values": values.tolist(),
            "empty_bins": np.flatnonzero(cnt == 0).tolist(),
        }
        diag = {"n_clipped": int(np.count_nonzero((raw < 0) | (raw > 1))), "bin_counts": cnt.tolist()}
        return Recalibrator("histogram", params, corrected, target, n, True, 0, diag)
    from scipy.optimize import minimize, minimize_scalar  # lazy: scipy.optimize is slow to import

    z = _logit(s, LOGIT_CLIP)
    if method == "temperature":
        slope, _ = recession_slope_min(z, y)
        lo, hi = 1.0 / T_BOUNDS[1], 1.0 / T_BOUNDS[0]
        res = minimize_scalar(
            lambda th: _loss_grad(np.array([th]), z[:, None], y)[0],
            bounds=(lo, hi),
            method="bounded",
            options={"xatol": 1e-10, "maxiter": 500},
        )
        theta = float(res.x)
        loss = float(res.fun)
        for edge in (lo, hi):  # the bounded scalar search never evaluates the end points themselves
            edge_loss = _loss_grad(np.array([edge]), z[:, None], y)[0]
            if edge_loss <= loss:
                theta, loss = edge, edge_loss
        at_bound = bool(min(abs(theta - lo), abs(theta - hi)) < 1e-6)
        params = {"temperature": 1.0 / theta, "clip": LOGIT_CLIP}
        diag = {"loss": loss, "at_bound": at_bound, "unbounded": bool(slope < -1e-12), "min_recession_slope": slope}
        return Recalibrator(
            "temperature", params, corrected, target, n, bool(res.success) and not at_bound, int(res.nfev), diag
        )
    x = np.column_stack([z, np.ones_like(z)])
    slope, _ = recession_slope_min(x, y)
    res = minimize(
        _loss_grad,
        np.array([1.0, 0.0]),
        args=(x, y),
        jac=True,
        method="L-BFGS-B",
        bounds=[(-PLATT_BOUND, PLATT_BOUND)] * 2,
        options={"gtol": 1e-10, "ftol": 1e-15, "maxiter": 1000},
    )
    alpha, beta = (float(v) for v in res.x)
    at_bound = bool(np.any(np.abs(res.x) > PLATT_BOUND - 1e-6))
    params = {"alpha": alpha, "beta": beta, "clip": LOGIT_CLIP}
    diag = {
        "loss": float(res.fun),
        "at_bound": at_bound,
        "unbounded": bool(slope < -1e-12),
        "min_recession_slope": slope,
    }
    return Recalibrator("platt", params, corrected, target, n, bool(res.success) and not at_bound, int(res.nit), diag)
