"""One function per calibration asset: frames in, a frame out (no dagster import).

Input frames (validated upstream by ``noisycal_platform.io``):
- annotations (long): item_id str, annotator_id str, label int (0/1, null for a class name), [label_text str],
  [timestamp], [source_file], [source_row]
- predictions: item_id str, score float64 in [0, 1], [model_version]; a multi-class version also has
  n_classes, classes (list of names) and probabilities (list, one per class), and subgroups (items.csv pairs)
- references (optional): item_id str, label int (0/1)

Which label space a version has is decided once, by `versions.version` (multi-class when its predictions carry
``classes``); every function here is that object's method of the same step, with the same output columns for
both label spaces. The assets call `versions.version` directly; these functions are for the other callers
(the reports asset, tests). Subgroup rows come from `subgroups`.

Asset → function: ``calibration/channel_estimates`` → `channel_estimates`; ``calibration/nc_ece_report`` →
`nc_ece_report`; ``calibration/recalibrators`` → `recalibrators` (+ `recalibrator_exports` for the JSON files);
``calibration/recalibration_report`` → `recalibration_report`. Each docstring states its formula's seed section.

The channel table's ``weight`` column holds the exact per-annotator weights every downstream NC-ECE uses,
so the SQL model reproduces the NC-ECE bins with (Hanada and Futami 2026 §3):
    Ỹ_i = Σ_{j∈J_i} weight_j·(label_ij − fpr_j)/gap_j / Σ_{j∈J_i} weight_j,  J_i = annotators of item i,
    bin_i = least(floor(score_i·B), B − 1), per bin: n, avg(score), avg(Ỹ), avg(Ỹ) − avg(score);
items without annotation (or Σ weight = 0) are excluded; only non-empty bins appear.
"""

from __future__ import annotations

import polars as pl

from .class_tables import UnknownLabelError
from .recalibration_tables import recalibrator_exports
from .tables import annotation_matrix, channels_from_table
from .versions import ASSUMPTION_COLUMNS, version

__all__ = [
    "ASSUMPTION_COLUMNS",
    "UnknownLabelError",
    "annotation_matrix",
    "calibration_report",
    "channel_estimates",
    "channels_from_table",
    "nc_ece_report",
    "recalibration_report",
    "recalibrator_exports",
    "recalibrators",
]


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
    (`tables.channel_estimates_table`, Hanada and Futami 2026 §4), plus the two assumption checks of §D.7
    (`diagnostics.assumption_checks`: statistic and bootstrap p-value, repeated on every row).

    A multi-class version (``n_classes`` > 2 or p_<class> predictions): confusion matrices by multi-class
    Dawid–Skene in the long format of `class_tables` (``method`` is not used: Dawid–Skene is the one estimator);
    the two assumption checks are defined for binary channels and are left null with a note.
    (`versions.BinaryVersion.estimate_channels` / `versions.MulticlassVersion.estimate_channels`.)"""
    return version(annotations, predictions).estimate_channels(
        method=method, weights=weights, n_bins=n_bins, seed=seed, n_check_replicates=n_check_replicates
    )


def nc_ece_report(
    annotations: pl.DataFrame,
    predictions: pl.DataFrame,
    channel_estimates: pl.DataFrame,
    *,
    n_bins: int = 15,
    n_bootstrap: int = 500,
    seed: int = 0,
    min_items_per_subgroup: int = 200,
    n_bootstrap_subgroups: int | None = None,
) -> pl.DataFrame:
    """NC-ECE (plug-in and debiased), its interval, the calibration test and the naive ECEs
    (`inference.calibration_test` and the `tables.nc_ece_report_table` around it, Hanada and Futami 2026 §3,
    §C); for a multi-class version top-label and classwise rows (`class_tables.class_nc_ece_rows`, column
    ``kind``). Then one row per subgroup of items.csv and kind (`subgroups`: estimator "nc_ece_subgroup",
    Holm-adjusted across the subgroups), with ``n_bootstrap_subgroups`` replicates per test (None:
    ``n_bootstrap``). (`versions.*.nc_ece_table`.)"""
    return version(annotations, predictions).nc_ece_table(
        channel_estimates, n_bins=n_bins, n_bootstrap=n_bootstrap, seed=seed,
        min_items_per_subgroup=min_items_per_subgroup, n_bootstrap_subgroups=n_bootstrap_subgroups,
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
    (`recalibration_tables.recalibrators_table`, Hanada and Futami 2026 §5, §E.2, §E.5); multi-class: temperature
    scaling
    and the classwise projected histogram (`class_tables.class_recalibrators_table`). (`versions.*.recalibrate`.)"""
    return version(annotations, predictions).recalibrate(channel_estimates, n_bins=n_bins, method=method, seed=seed)


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
    (`recalibration_tables.recalibration_report_table`, Hanada and Futami 2026 §E.4; multi-class:
    `class_tables.class_recalibration_report_table`). (`versions.*.recalibration_report`.)"""
    return version(annotations, predictions).recalibration_report(
        channel_estimates, recalibrators, references, n_bins=n_bins
    )


def calibration_report(
    annotations: pl.DataFrame,
    predictions: pl.DataFrame,
    references: pl.DataFrame | None,
    channel_estimates: pl.DataFrame,
    nc_ece_report: pl.DataFrame,
    recalibrators: pl.DataFrame,
    recalibration_report: pl.DataFrame,
    *,
    model_version: str = "",
    n_bins: int = 15,
    nc_ece_limit: float | None = None,
    min_items_per_subgroup: int | None = None,
) -> tuple[str, str]:
    """One version's calibration report: (HTML, markdown summary) — `report.render_calibration_report` for a
    binary version, `report.render_multiclass_report` for a multi-class one (`versions.*.report`); both end with
    the subgroups. The summary is `report.calibration_summary_markdown` in the version's layout
    (`versions.*.summary`)."""
    v = version(annotations, predictions)
    summary = v.summary(channel_estimates, nc_ece_report, recalibration_report, model_version)
    text = v.report(
        channel_estimates, nc_ece_report, recalibrators, recalibration_report, references,
        model_version=model_version, n_bins=n_bins, nc_ece_limit=nc_ece_limit,
        min_items_per_subgroup=min_items_per_subgroup,
    )
    return text, summary
