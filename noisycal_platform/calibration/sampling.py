"""Sample regimes for NC-ECE with estimated channels (Hanada and Futami 2026 §3, §C.2–C.4).

- "split": channels, prevalence and weights are fitted on a random ``fit_fraction`` of the items and
  NC-ECE is evaluated on the rest (independent samples, §3 / §C.2).
- "reuse": one sample for both; allowed because the predictor and the bins are fixed in advance (§C.3).
- "cross_fit": items are split into ``n_folds`` folds; for each fold the channels are fitted on the other
  folds and the fold's corrected labels Ỹ_i are formed with them. The held-out bin moments
  Σ_{i∈k}(Ỹ_i − s_i) are summed over folds on one common evaluation partition (the fixed bins), and
  NC-ECE = Σ_k |Σ_{i∈k}(Ỹ_i − s_i)| / N (§C.4).
In every regime the "iv" weights use the fitted `ChannelFit.prevalence`. Randomness: ``seed``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from .channels import ChannelFit, estimate_channels
from .channels._base import as_annotation_array
from .nc_ece import _bins_frame, _check_n_bins, _check_scores, bin_index, corrected_labels
from .weights import aggregation_weights, resolve_weights

__all__ = ["REGIMES", "RegimeResult", "nc_ece_estimated", "regime_partition"]

REGIMES = ("split", "reuse", "cross_fit")


@dataclass(frozen=True, eq=False)
class RegimeResult:
    """NC-ECE under a sample regime: ``value``, ``bins`` (as `NCECEResult.bins`), the channel ``fits``
    (one, or one per fold), ``fold`` (per item: fold index for cross_fit; 0 = fit / 1 = eval for split;
    0 for reuse), ``n_items`` evaluated (annotated, positive weight)."""

    value: float
    bins: pl.DataFrame
    regime: str
    fits: tuple[ChannelFit, ...]
    fold: np.ndarray
    n_items: int


def regime_partition(
    n: int, regime: str, n_folds: int = 2, fit_fraction: float = 0.5, seed: int = 0
) -> np.ndarray:
    """Item → fold labels: split → 0 (fit) / 1 (evaluate); cross_fit → 0..n_folds−1 (balanced); reuse → 0."""
    if regime not in REGIMES:
        raise ValueError(f"regime must be one of {REGIMES}, got {regime!r}")
    if regime == "reuse":
        return np.zeros(n, np.int64)
    rng = np.random.default_rng(seed)
    perm = rng.permutation(n)
    fold = np.empty(n, np.int64)
    if regime == "split":
        if not 0.0 < fit_fraction < 1.0:
            raise ValueError(f"fit_fraction must be in (0, 1), got {fit_fraction!r}")
        n_fit = round(fit_fraction * n)
        fold[perm[:n_fit]] = 0
        fold[perm[n_fit:]] = 1
        return fold
    if not isinstance(n_folds, int) or n_folds < 2:
        raise ValueError(f"n_folds must be an integer >= 2, got {n_folds!r}")
    fold[perm] = np.arange(n) % n_folds
    return fold


def nc_ece_estimated(
    scores: Any,
    annotations: Any,
    regime: str = "reuse",
    method: str = "auto",
    weights: Any = "iv",
    n_bins: int = 15,
    n_folds: int = 2,
    fit_fraction: float = 0.5,
    n_groups: int = 2,
    n_starts: int = 10,
    seed: int = 0,
) -> RegimeResult:
    """NC-ECE with channels estimated by `estimate_channels` under a sample regime (Hanada and Futami 2026 §C.2–C.4)."""
    n_bins = _check_n_bins(n_bins)
    s = _check_scores(scores).astype(np.float64)
    a = as_annotation_array(annotations)
    if a.shape[0] != s.size:
        raise ValueError(f"annotations has {a.shape[0]} rows but scores has {s.size}")
    fold = regime_partition(s.size, regime, n_folds, fit_fraction, seed)
    b = bin_index(s, n_bins)
    sum_y = np.zeros(n_bins)
    sum_s = np.zeros(n_bins)
    n_k = np.zeros(n_bins, np.int64)
    fits = []
    if regime == "reuse":
        pairs = [(np.ones(s.size, bool), np.ones(s.size, bool))]
    elif regime == "split":
        pairs = [(fold == 0, fold == 1)]
    else:
        pairs = [(fold != f, fold == f) for f in range(n_folds)]
    for fit_mask, eval_mask in pairs:  # one pass per fold
        fit = estimate_channels(
            a[fit_mask], scores=s[fit_mask], method=method, n_groups=n_groups, n_starts=n_starts, seed=seed
        )
        fits.append(fit)
        if isinstance(weights, str):
            w = aggregation_weights(fit.channels, fit.prevalence, rule=weights)
        else:
            w = resolve_weights(weights, fit.channels, None)
        y = corrected_labels(a[eval_mask], fit.channels, w)
        inc = ~np.isnan(y)
        be = b[eval_mask][inc]
        n_k += np.bincount(be, minlength=n_bins)
        sum_s += np.bincount(be, weights=s[eval_mask][inc], minlength=n_bins)
        sum_y += np.bincount(be, weights=y[inc], minlength=n_bins)
    n_items = int(n_k.sum())
    if n_items == 0:
        raise ValueError("no annotated item to evaluate")
    value = float(np.abs(sum_y - sum_s).sum() / n_items)
    return RegimeResult(value, _bins_frame(n_k, sum_s, sum_y), regime, tuple(fits), fold, n_items)
