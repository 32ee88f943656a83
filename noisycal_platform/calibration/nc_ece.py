"""Binned ECE and noise-corrected ECE (NC-ECE) (Hanada and Futami 2026 §2.1, §3, §C.1, §C.5).

Bin rule (shared with the SQL model): bin(s) = min(floor(s·B), B − 1), s ∈ [0, 1], float64 product.

Corrected label of item i (exactly what the SQL model reproduces):
    J_i = annotators who labelled i;  W_i = Σ_{j∈J_i} w_j
    Ỹ_i = Σ_{j∈J_i} w_j·(A_ij − a_j)/δ_j / W_i          (weights renormalised over the annotators present)
Items with J_i = ∅ ("unannotated") or W_i = 0 ("zero weight") are excluded and counted. With N included
items and bins k:
    n_k = #items in k, mean_score_k = mean s, mean_corrected_label_k = mean Ỹ,
    residual_k = mean_corrected_label_k − mean_score_k,
    NC-ECE = Σ_k (n_k/N)·|residual_k| = Σ_k |Σ_{i∈k}(Ỹ_i − s_i)| / N                  (Hanada and Futami 2026 §3)
Identity channels (a = b = 0) give the ordinary binned ECE.

Implementation: Ỹ_i depends only on the item's answer pattern, so a compiled one-pass kernel (numba,
`_nc_ece_kernel`) validates every score and annotation, counts items and sums scores per (bin, pattern) cell
(no per-item temporaries), then the ≤ B·3^K cells are combined with the per-pattern corrected labels (Hanada
and Futami 2026 §F.3: O(nK + M)).
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from .channels._base import Channel, as_annotation_array
from .channels.known import as_channels
from .weights import resolve_weights

__all__ = [
    "NC_ECE_BINS_SCHEMA",
    "NCECEResult",
    "bin_index",
    "binned_ece",
    "corrected_labels",
    "nc_ece",
    "plugin_prevalence",
]

_CHUNK = 1 << 16  # the item ranges are cut on multiples of this
_PARTS = 2  # fixed item ranges of the kernel (threads: at most this many)
_PARALLEL_MIN = 1 << 20  # items from which the ranges run on threads
_MAX_CELLS = 1 << 21
PREVALENCE_CLIP = 1e-4  # Hanada and Futami 2026 §F.4: plug-in class proportion clipped to [1e-4, 1 − 1e-4]


def _check_n_bins(n_bins: Any) -> int:
    if not isinstance(n_bins, (int, np.integer)) or isinstance(n_bins, bool) or n_bins < 1:
        raise ValueError(f"n_bins must be a positive integer, got {n_bins!r}")
    return int(n_bins)


def _check_scores(scores: Any, name: str = "scores", check_range: bool = True) -> np.ndarray:
    s = np.asarray(scores)
    if s.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {s.shape}")
    if not np.issubdtype(s.dtype, np.floating):
        s = s.astype(np.float64)
    if check_range and s.size and not (s.min() >= 0.0 and s.max() <= 1.0):  # NaN fails both comparisons
        _raise_bad_score(s, name)
    return s


def _raise_bad_score(s: np.ndarray, name: str = "scores") -> None:
    bad = s[~((s >= 0) & (s <= 1))][0]
    raise ValueError(f"{name} must lie in [0, 1] with no NaN, got {bad!r}")


def bin_index(scores: Any, n_bins: int = 15) -> np.ndarray:
    """bin(s) = min(floor(s·B), B − 1) as int64 (the one bin rule of the project)."""
    n_bins = _check_n_bins(n_bins)
    s = _check_scores(scores)
    b = np.floor(s.astype(np.float64) * n_bins).astype(np.int64)
    np.minimum(b, n_bins - 1, out=b)
    return b


def binned_ece(scores: Any, labels: Any, n_bins: int = 15) -> float:
    """Binned ECE Σ_k (n_k/n)·|mean_k(y) − mean_k(s)|; ``labels`` may be real-valued (Hanada and Futami 2026 §2.1)."""
    s = _check_scores(scores)
    y = np.asarray(labels, dtype=np.float64)
    if y.shape != s.shape:
        raise ValueError(f"labels must have shape {s.shape}, got {y.shape}")
    if not np.all(np.isfinite(y)):
        raise ValueError("labels must be finite (no NaN)")
    if s.size == 0:
        raise ValueError("scores is empty")
    b = bin_index(s, n_bins)
    diff = np.bincount(b, weights=y - s, minlength=n_bins)
    return float(np.abs(diff).sum() / s.size)


def _ann_array(annotations: Any, n: int, validate: bool = True) -> np.ndarray:
    a = as_annotation_array(annotations, validate=validate)
    if a.shape[0] != n:
        raise ValueError(f"annotations has {a.shape[0]} rows but scores has {n}")
    return a


def corrected_labels(annotations: Any, channels: Any, weights: Any) -> np.ndarray:
    """Per-item Ỹ_i = Σ_{j∈J_i} w_j (A_ij − a_j)/δ_j / Σ_{j∈J_i} w_j; NaN where J_i = ∅ or Σ w = 0 (§3).

    ``weights`` is an explicit array (use `aggregation_weights` for a rule).
    """
    a = as_annotation_array(annotations)
    chans = as_channels(channels, a.shape[1])
    w = resolve_weights(weights, chans, None)
    x = a.astype(np.float64)
    if np.issubdtype(a.dtype, np.integer):
        x[a < 0] = np.nan
    fpr = np.array([c.fpr for c in chans])
    gap = np.array([c.gap for c in chans])
    present = ~np.isnan(x)
    wp = present * w
    den = wp.sum(axis=1)
    num = (np.where(present, (x - fpr) / gap, 0.0) * wp).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = num / den
    out[den <= 0] = np.nan
    return out


def plugin_prevalence(annotations: Any, channels: Any) -> float:
    """π̂ = mean of equally weighted corrected labels over annotated items, clipped to [1e-4, 1−1e-4] (§F.4)
    (Hanada and Futami 2026)."""
    a = as_annotation_array(annotations)
    y = corrected_labels(a, channels, np.ones(a.shape[1]))
    y = y[~np.isnan(y)]
    if y.size == 0:
        raise ValueError("annotations has no labelled item")
    return float(np.clip(y.mean(), PREVALENCE_CLIP, 1 - PREVALENCE_CLIP))


def _raise_bad_item(s: np.ndarray, a: np.ndarray, i: int) -> None:
    """Name the bad input of item ``i`` (one the kernel stopped at): its score, else its first bad annotation."""
    _check_scores(s[i : i + 1])
    row = a[i : i + 1]
    if np.issubdtype(a.dtype, np.floating):
        bad = row[~(np.isnan(row) | (row == 0) | (row == 1))].ravel()[0]
        raise ValueError(f"annotations must contain only 0, 1 or NaN (missing), got {bad!r}")
    bad = row[(row < -1) | (row > 1)].ravel()[0]
    raise ValueError(f"annotations (integer) must contain only 0, 1 or -1 (missing), got {bad!r}")


def _kernel_inputs(s: np.ndarray, a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """C-contiguous float64 scores and C-contiguous native-order annotations (float32/float64 or an integer dtype
    as given; other floats widened to float64): the layouts the compiled kernel is built for."""
    s = np.ascontiguousarray(s, dtype=np.float64)
    if np.issubdtype(a.dtype, np.floating) and a.dtype not in (np.float32, np.float64):
        a = a.astype(np.float64)
    elif not a.dtype.isnative:
        a = a.astype(a.dtype.newbyteorder("="))
    return s, np.ascontiguousarray(a)


def _cell_sums(s: np.ndarray, a: np.ndarray, n_bins: int) -> tuple[np.ndarray, np.ndarray]:
    """Item counts and score sums per (bin, pattern) cell; pattern = Σ_j d_j·3^j with digit d = label + 1
    (0 = missing, 1 = label 0, 2 = label 1). Validates scores and annotation values in the same pass.

    One compiled pass (`_nc_ece_kernel.fold_cells`) into (Σ s·B, count) float64 pairs per cell. s = 1 lands in
    an extra bin row B (trunc(1·B) = B), folded into B − 1 afterwards, which saves the per-item min. Large inputs
    are cut into ``_PARTS`` fixed item ranges (on 2^16-item boundaries), each summed into its own table (on up
    to ``_PARTS`` threads: the kernel releases the GIL) and the tables added in range order, so the result does
    not depend on the thread count; the first bad item of the first range that has one is the one named.
    Returns two (B, 3^K) arrays: counts (int64) and Σ s (float64, = Σ (s·B) / B).
    """
    from ._nc_ece_kernel import fold_cells  # numba: imported on the first NC-ECE call, not with the package

    s, a = _kernel_inputs(s, a)
    n, k = a.shape
    n_pat = 3**k
    n_cells = (n_bins + 1) * n_pat  # one extra bin row for s == 1 (trunc(s·B) = B), folded into B − 1 below
    pow3 = tuple(3**j for j in range(k))
    parts = _PARTS if n >= _PARALLEL_MIN else 1
    cuts = [n * p // parts // _CHUNK * _CHUNK for p in range(parts)] + [n]
    tables = np.zeros((parts, n_cells, 2), np.float64)
    jobs = [
        (s[cuts[p] : cuts[p + 1]], a[cuts[p] : cuts[p + 1]], n_bins, pow3, tables[p].reshape(-1)) for p in range(parts)
    ]
    workers = min(parts, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
    if workers <= 1:
        stops = [fold_cells(*job) for job in jobs]
    else:
        with ThreadPoolExecutor(workers) as ex:
            stops = list(ex.map(lambda job: fold_cells(*job), jobs))
    for p, stop in enumerate(stops):  # in range order
        if stop >= 0:
            _raise_bad_item(s, a, cuts[p] + stop)
    cells = tables[0]
    for t in tables[1:]:
        cells += t
    cells = cells.reshape(n_bins + 1, n_pat, 2)
    counts = cells[..., 1].astype(np.int64)  # exact: integers below 2^53
    ssum = cells[..., 0] / n_bins
    counts[n_bins - 1] += counts[n_bins]
    ssum[n_bins - 1] += ssum[n_bins]
    return counts[:n_bins], ssum[:n_bins]


def _pattern_table(k: int) -> np.ndarray:
    """(3^K, K) digits of every pattern: 0 = missing, 1 = label 0, 2 = label 1."""
    p = np.arange(3**k)
    return np.stack([(p // 3**j) % 3 for j in range(k)], axis=1)


@dataclass(frozen=True, eq=False)
class NCECEResult:
    """NC-ECE with its per-bin table.

    value : float, Σ_k (n_k/N)|residual_k|.
    bins : polars frame, non-empty bins only, sorted: bin (Int64), n (Int64), mean_score,
        mean_corrected_label, residual (Float64; residual = mean_corrected_label − mean_score).
    n_items : N, items included. n_unannotated : items with no annotation (excluded).
    n_zero_weight : items whose annotators all have weight 0 (excluded).
    weights : per-annotator weights used (sum 1). prevalence : π used for "iv" (nan if unused).
    """

    value: float
    bins: pl.DataFrame
    n_items: int
    n_unannotated: int
    n_zero_weight: int
    weights: np.ndarray
    prevalence: float
    n_bins: int


NC_ECE_BINS_SCHEMA = {
    "bin": pl.Int64,
    "n": pl.Int64,
    "mean_score": pl.Float64,
    "mean_corrected_label": pl.Float64,
    "residual": pl.Float64,
}


def _bins_frame(n_k: np.ndarray, sum_s: np.ndarray, sum_y: np.ndarray) -> pl.DataFrame:
    nz = np.flatnonzero(n_k)
    nn = n_k[nz].astype(np.float64)
    ms = sum_s[nz] / nn
    my = sum_y[nz] / nn
    return pl.DataFrame(
        {
            "bin": nz.astype(np.int64),
            "n": n_k[nz].astype(np.int64),
            "mean_score": ms,
            "mean_corrected_label": my,
            "residual": my - ms,
        },
        schema=NC_ECE_BINS_SCHEMA,
    )


def nc_ece(
    scores: Any,
    annotations: Any,
    channels: Any,
    weights: Any = "iv",
    n_bins: int = 15,
    prevalence: float | None = None,
) -> NCECEResult:
    """Noise-corrected ECE: Σ_k |Σ_{i∈k}(Ỹ_i − s_i)| / N, Ỹ = Σ w_j (A_j − a_j)/δ_j renormalised (§3).

    Parameters
    ----------
    scores : (n,) floats in [0, 1].
    annotations : (n, K) float with NaN = missing, or int8/int with -1 = missing (int8 reads the fewest bytes).
    channels : K `Channel`s, (fpr, fnr) pairs or a `ChannelFit`; every gap must be > 0.
    weights : "iv", "equal", "gap", "sqgap" or an explicit length-K array (§4.4, §F.4).
    n_bins : B, equal-width bins with bin(s) = min(floor(s·B), B − 1).
    prevalence : π for "iv"; None → plug-in π̂ = mean of equally weighted corrected labels over the
        annotated items, clipped to [1e-4, 1 − 1e-4] (§F.4).
    """
    n_bins = _check_n_bins(n_bins)
    s = _check_scores(scores, check_range=False)  # range checked in the kernel (or below)
    if s.dtype != np.float64:
        s = s.astype(np.float64)
    a = _ann_array(annotations, s.size, validate=False)  # values are validated in the kernel
    k = a.shape[1]
    chans: tuple[Channel, ...] = as_channels(channels, k)
    if isinstance(weights, str) and weights not in ("iv", "equal", "gap", "sqgap"):
        raise ValueError(f"weights must be 'iv', 'equal', 'gap', 'sqgap' or an array, got {weights!r}")
    if prevalence is not None and not (0.0 <= float(prevalence) <= 1.0):
        raise ValueError(f"prevalence must be in [0, 1], got {prevalence!r}")
    fpr = np.array([c.fpr for c in chans])
    gap = np.array([c.gap for c in chans])
    if n_bins * 3**k <= _MAX_CELLS:
        counts, ssum = _cell_sums(s, a, n_bins)
        table = _pattern_table(k)
        present = table > 0
        ytab = np.where(present, (table - 1 - fpr) / gap, 0.0)  # (P, K) corrected labels
        n_pat_items = counts.sum(axis=0)
        annotated = present.any(axis=1)
        if isinstance(weights, str) and weights == "iv" and prevalence is None:
            eq = (ytab.sum(axis=1) / np.maximum(present.sum(axis=1), 1))[annotated]
            tot = n_pat_items[annotated].sum()
            if tot == 0:
                raise ValueError("annotations has no labelled item among the scored items")
            prevalence = float(np.clip(n_pat_items[annotated] @ eq / tot, PREVALENCE_CLIP, 1 - PREVALENCE_CLIP))
        w = resolve_weights(weights, chans, prevalence)
        wp = present * w
        den = wp.sum(axis=1)
        inc = annotated & (den > 0)
        ycorr = np.zeros(len(table))
        ycorr[inc] = (ytab[inc] * wp[inc]).sum(axis=1) / den[inc]
        n_k = counts[:, inc].sum(axis=1)
        sum_s = ssum[:, inc].sum(axis=1)
        sum_y = counts[:, inc] @ ycorr[inc]
        n_unann = int(n_pat_items[~annotated].sum())
        n_zero = int(n_pat_items[annotated & ~(den > 0)].sum())
    else:  # many annotators: per-item corrected labels
        s = _check_scores(s)
        a = _ann_array(a, s.size)
        if isinstance(weights, str) and weights == "iv" and prevalence is None:
            prevalence = plugin_prevalence(a, chans)
        w = resolve_weights(weights, chans, prevalence)
        y = corrected_labels(a, chans, w)
        obs_any = ~np.isnan(a).all(axis=1) if np.issubdtype(a.dtype, np.floating) else (a >= 0).any(axis=1)
        inc = ~np.isnan(y)
        b = bin_index(s, n_bins)[inc]
        n_k = np.bincount(b, minlength=n_bins)
        sum_s = np.bincount(b, weights=s[inc], minlength=n_bins)
        sum_y = np.bincount(b, weights=y[inc], minlength=n_bins)
        n_unann = int((~obs_any).sum())
        n_zero = int((obs_any & ~inc).sum())
    n_items = int(n_k.sum())
    if n_items == 0:
        raise ValueError("no item is both scored and annotated (with positive weight)")
    value = float(np.abs(sum_y - sum_s).sum() / n_items)
    return NCECEResult(
        value=value,
        bins=_bins_frame(n_k, sum_s, sum_y),
        n_items=n_items,
        n_unannotated=n_unann,
        n_zero_weight=n_zero,
        weights=w,
        prevalence=float("nan") if prevalence is None else float(prevalence),
        n_bins=n_bins,
    )
