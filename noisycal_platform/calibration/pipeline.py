"""One function per calibration asset: frames in, a frame out (no dagster import).

Input frames (validated upstream by ``noisycal_platform.io``):
- annotations (long): item_id str, annotator_id str, label int (0/1), [timestamp], [source_file]
- predictions: item_id str, score float64 in [0, 1], [model_version]
- references (optional): item_id str, label int (0/1)

Asset → function: ``calibration/channel_estimates`` → `channel_estimates`; ``calibration/nc_ece_report`` →
`nc_ece_report`; ``calibration/recalibrators`` → `recalibrators` (+ `recalibrator_exports` for the JSON files);
``calibration/recalibration_report`` → `recalibration_report`. Each docstring states its formula's seed section.

The channel table's ``weight`` column holds the exact per-annotator weights every downstream NC-ECE uses,
so the SQL model reproduces the NC-ECE bins with (seed 000 §3):
    Ỹ_i = Σ_{j∈J_i} weight_j·(label_ij − fpr_j)/gap_j / Σ_{j∈J_i} weight_j,  J_i = annotators of item i,
    bin_i = least(floor(score_i·B), B − 1), per bin: n, avg(score), avg(Ỹ), avg(Ỹ) − avg(score);
items without annotation (or Σ weight = 0) are excluded; only non-empty bins appear.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from .diagnostics import assumption_checks
from .recalibration_tables import recalibration_report_table, recalibrator_exports, recalibrators_table
from .tables import (
    AnnotationMatrix,
    annotation_matrix,
    channel_estimates_table,
    channels_from_table,
    nc_ece_report_table,
)

__all__ = [
    "ASSUMPTION_COLUMNS",
    "annotation_matrix",
    "channel_estimates",
    "channels_from_table",
    "nc_ece_report",
    "recalibration_report",
    "recalibrator_exports",
    "recalibrators",
]

ASSUMPTION_COLUMNS = {
    "independence_statistic": pl.Float64,
    "independence_p_value": pl.Float64,
    "invariance_statistic": pl.Float64,
    "invariance_p_value": pl.Float64,
    "assumption_note": pl.Utf8,
}


def _matrix(annotations: pl.DataFrame, predictions: pl.DataFrame) -> AnnotationMatrix:
    return annotation_matrix(annotations, predictions.select("item_id", "score"))


def channel_estimates(
    annotations: pl.DataFrame,
    predictions: pl.DataFrame,
    *,
    method: str = "auto",
    weights: str = "iv",
    n_bins: int = 15,
    seed: int = 0,
    n_check_replicates: int = 200,
) -> pl.DataFrame:
    """Channels (a_j, b_j, δ_j), aggregation weights and fit diagnostics, one row per annotator
    (`tables.channel_estimates_table`, seed 000 §4), plus the two assumption checks of §D.7
    (`diagnostics.assumption_checks`: statistic and bootstrap p-value, repeated on every row)."""
    matrix = _matrix(annotations, predictions)
    table = channel_estimates_table(matrix, method=method, weights=weights, n_bins=n_bins, seed=seed)
    checks = assumption_checks(matrix.values, matrix.scores, n_replicates=n_check_replicates, seed=seed)
    values = {
        "independence_statistic": checks.independence_statistic,
        "independence_p_value": checks.independence_p_value,
        "invariance_statistic": checks.invariance_statistic,
        "invariance_p_value": checks.invariance_p_value,
        "assumption_note": checks.note,
    }
    return table.with_columns(pl.lit(values[c], dtype=t).alias(c) for c, t in ASSUMPTION_COLUMNS.items())


def nc_ece_report(
    annotations: pl.DataFrame,
    predictions: pl.DataFrame,
    channel_estimates: pl.DataFrame,
    *,
    n_bins: int = 15,
    n_bootstrap: int = 500,
    seed: int = 0,
) -> pl.DataFrame:
    """NC-ECE (plug-in and debiased), its interval, the calibration test and the naive ECEs
    (`tables.nc_ece_report_table` → `inference.calibration_test`, seed 000 §3, §C)."""
    return nc_ece_report_table(
        _matrix(annotations, predictions), channel_estimates, n_bins=n_bins, n_bootstrap=n_bootstrap, seed=seed
    )


def recalibrators(
    annotations: pl.DataFrame,
    predictions: pl.DataFrame,
    channel_estimates: pl.DataFrame,
    *,
    n_bins: int = 15,
    method: str = "auto",
    seed: int = 0,
) -> pl.DataFrame:
    """Corrected and naive recalibrators fitted on the fit part of the split, channels fitted there too
    (`recalibration_tables.recalibrators_table`, seed 000 §5, §E.2, §E.5)."""
    return recalibrators_table(
        _matrix(annotations, predictions), channel_estimates, n_bins=n_bins, method=method, seed=seed
    )


def recalibration_report(
    annotations: pl.DataFrame,
    predictions: pl.DataFrame,
    channel_estimates: pl.DataFrame,
    recalibrators: pl.DataFrame,
    references: pl.DataFrame | None = None,
    *,
    n_bins: int = 15,
) -> pl.DataFrame:
    """Every recalibrator scored on the held-out items with channels not fitted on them
    (`recalibration_tables.recalibration_report_table`, seed 000 §E.4)."""
    refs: Any = references if references is not None and references.height else None
    return recalibration_report_table(
        _matrix(annotations, predictions), recalibrators, channel_estimates, references=refs, n_bins=n_bins
    )
