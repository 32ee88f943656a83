"""Impact of cleaning on a model's evaluation (Gröger et al. 2023 §4.3, Table 2).

AUROC, AP and AUPRG (higher is better) on all items vs on the items kept after removing confirmed issues.
The paired bootstrap resamples the full dataset; each replicate is evaluated before cleaning and,
restricted to kept items, after, so the difference after − before is paired. Reported: the point
difference, the bootstrap median and the 95% percentile CI; flag ``*`` when 0 lies strictly outside the
CI, ``°`` when a bound is exactly 0 (borderline).
"""

from __future__ import annotations

import numpy as np
import polars as pl

from noisycal_platform.metrics import METRICS, bootstrap_ranking_metrics, curve_metrics, tie_groups

__all__ = ["IMPACT_SCHEMA", "cleaning_impact", "significance_flag"]

IMPACT_SCHEMA: dict[str, pl.DataType] = {
    "metric": pl.String(),  # auroc | ap | auprg
    "n_before": pl.Int64(),
    "n_after": pl.Int64(),
    "before": pl.Float64(),
    "after": pl.Float64(),
    "difference": pl.Float64(),  # after − before on the observed data
    "median": pl.Float64(),  # bootstrap median of the difference
    "ci_low": pl.Float64(),
    "ci_high": pl.Float64(),
    "flag": pl.String(),  # "*", "°" or ""
}


def significance_flag(ci_low: float, ci_high: float) -> str:
    """``*`` if 0 is strictly outside [lo, hi], ``°`` if a bound equals 0, else "" (Gröger et al. 2023 Table 2)."""
    if not (np.isfinite(ci_low) and np.isfinite(ci_high)):
        return ""
    if ci_low == 0 or ci_high == 0:
        return "°"
    if ci_low > 0 or ci_high < 0:
        return "*"
    return ""


def _point(y: np.ndarray, s: np.ndarray) -> dict[str, float]:
    pos, neg = tie_groups(y, s)
    return {k: float(v) for k, v in curve_metrics(pos, neg).items()}


def cleaning_impact(
    y_true,
    y_score,
    keep,
    *,
    n_boot: int = 1000,
    seed: int | np.random.Generator = 0,
    level: float = 0.95,
) -> pl.DataFrame:
    """Before/after metrics and the paired bootstrap of their difference; one row per metric."""
    y = np.asarray(y_true)
    s = np.asarray(y_score, dtype=float)
    k = np.asarray(keep, dtype=bool)
    if k.shape != y.shape:
        raise ValueError(f"keep must have shape {y.shape}, got {k.shape}")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    if k.sum() == 0:
        raise ValueError("keep removes every item; nothing left to evaluate")
    reps = bootstrap_ranking_metrics(y, s, n_boot=n_boot, seed=seed, masks=[np.ones_like(k), k])
    before = _point(y.astype(np.int8), s)
    after = _point(y[k].astype(np.int8), s[k])
    rows = []
    for m in METRICS:
        d = reps[m][1] - reps[m][0]
        d = d[np.isfinite(d)]
        if d.size:
            lo, med, hi = np.percentile(d, [50 * (1 - level), 50, 50 * (1 + level)])
        else:
            lo = med = hi = float("nan")
        rows.append(dict(metric=m, n_before=y.size, n_after=int(k.sum()), before=before[m], after=after[m],
                         difference=after[m] - before[m], median=float(med), ci_low=float(lo),
                         ci_high=float(hi), flag=significance_flag(float(lo), float(hi))))
    return pl.DataFrame(rows, schema=IMPACT_SCHEMA)
