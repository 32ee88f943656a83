"""One function per calibration asset: frames in, a frame out (no dagster import).

Input frames (validated upstream by ``noisycal_platform.io``):
- annotations (long): item_id str, annotator_id str, label int (0/1, null for a class name), [label_text str],
  [timestamp], [source_file], [source_row]
- predictions: item_id str, score float64 in [0, 1], [model_version]; a multi-class version also has
  n_classes, classes (list of names) and probabilities (list, one per class), and subgroups (items.csv pairs)
- references (optional): item_id str, label int (0/1)

A version is multi-class when its predictions carry ``classes`` (`class_tables.is_multiclass`); every function
then takes the `class_tables` path with the same output columns. Subgroup rows come from `subgroups`.

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

from ..contracts import BINARY_CLASSES
from .class_tables import (
    ClassMatrix,
    ConfusionTable,
    UnknownLabelError,
    class_channel_rows,
    class_matrix,
    class_nc_ece_rows,
    class_recalibration_report_table,
    class_recalibrators_table,
    confusion_from_table,
    is_multiclass,
    scored_annotations,
)
from .diagnostics import assumption_checks
from .recalibration_tables import recalibration_report_table, recalibrator_exports, recalibrators_table
from .subgroups import binary_subgroup_rows, class_subgroup_rows
from .tables import (
    CHANNEL_TABLE_SCHEMA,
    NC_ECE_REPORT_SCHEMA,
    AnnotationMatrix,
    annotation_matrix,
    channel_estimates_table,
    channels_from_table,
    nc_ece_report_table,
)

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

ASSUMPTION_COLUMNS = {
    "independence_statistic": pl.Float64,
    "independence_p_value": pl.Float64,
    "invariance_statistic": pl.Float64,
    "invariance_p_value": pl.Float64,
    "assumption_note": pl.Utf8,
}


def _matrix(annotations: pl.DataFrame, predictions: pl.DataFrame) -> AnnotationMatrix:
    """The binary version's annotation matrix. An annotation of a scored item whose label is not 0/1 (a class
    name, stored with a null ``label``) raises `UnknownLabelError` with its file, row and column; such labels
    on other items (a multi-class version's) are left out."""
    if "label_text" in annotations.columns:
        scored_annotations(annotations, predictions, list(BINARY_CLASSES))
        annotations = annotations.filter(pl.col("label").is_not_null())
    return annotation_matrix(annotations, predictions.select("item_id", "score"))


def _class_inputs(
    annotations: pl.DataFrame, predictions: pl.DataFrame, channel_estimates: pl.DataFrame
) -> tuple[ClassMatrix, ConfusionTable]:
    cm = class_matrix(annotations, predictions)
    return cm, confusion_from_table(channel_estimates, cm.classes)


def _with_assumptions(table: pl.DataFrame, values: dict[str, Any]) -> pl.DataFrame:
    return table.with_columns(pl.lit(values[c], dtype=t).alias(c) for c, t in ASSUMPTION_COLUMNS.items())


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
    (`diagnostics.assumption_checks`: statistic and bootstrap p-value, repeated on every row).

    A multi-class version (``n_classes`` > 2 or p_<class> predictions): confusion matrices by multi-class
    Dawid–Skene in the long format of `class_tables` (``method`` is not used: Dawid–Skene is the one estimator);
    the two assumption checks are defined for binary channels and are left null with a note."""
    if is_multiclass(predictions):
        rows, _ = class_channel_rows(class_matrix(annotations, predictions), weights=weights, n_bins=n_bins,
                                     seed=seed)
        note = "the independence and score-invariance checks are defined for binary channels; not run for C classes"
        return _with_assumptions(pl.DataFrame(rows, schema=CHANNEL_TABLE_SCHEMA),
                                 {c: None for c in ASSUMPTION_COLUMNS} | {"assumption_note": note})
    matrix = _matrix(annotations, predictions)
    table = channel_estimates_table(matrix, method=method, weights=weights, n_bins=n_bins, seed=seed)
    checks = assumption_checks(matrix.values, matrix.scores, n_replicates=n_check_replicates, seed=seed)
    return _with_assumptions(table, {
        "independence_statistic": checks.independence_statistic,
        "independence_p_value": checks.independence_p_value,
        "invariance_statistic": checks.invariance_statistic,
        "invariance_p_value": checks.invariance_p_value,
        "assumption_note": checks.note,
    })


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
    (`tables.nc_ece_report_table` → `inference.calibration_test`, seed 000 §3, §C); for a multi-class version
    top-label and classwise rows (`class_tables.class_nc_ece_rows`, column ``kind``). Then one row per subgroup
    of items.csv and kind (`subgroups`: estimator "nc_ece_subgroup", Holm-adjusted across the subgroups), with
    ``n_bootstrap_subgroups`` replicates per test (None: ``n_bootstrap``)."""
    n_sub = n_bootstrap if n_bootstrap_subgroups is None else n_bootstrap_subgroups
    if is_multiclass(predictions):
        cm, ct = _class_inputs(annotations, predictions, channel_estimates)
        rule = str(channel_estimates["weight_rule"][0])
        rows = class_nc_ece_rows(cm, ct, n_bins=n_bins, n_bootstrap=n_bootstrap, seed=seed, weight_rule=rule)
        rows += class_subgroup_rows(cm, predictions, ct, n_bins=n_bins, n_bootstrap=n_sub, seed=seed,
                                    min_items=min_items_per_subgroup)
        return pl.DataFrame([{c: r.get(c) for c in NC_ECE_REPORT_SCHEMA} for r in rows], schema=NC_ECE_REPORT_SCHEMA)
    matrix = _matrix(annotations, predictions)
    table = nc_ece_report_table(matrix, channel_estimates, n_bins=n_bins, n_bootstrap=n_bootstrap, seed=seed)
    chans, w = channels_from_table(channel_estimates).for_matrix(matrix)
    rows = binary_subgroup_rows(matrix, predictions, chans, w, n_bins=n_bins, n_bootstrap=n_sub, seed=seed,
                                min_items=min_items_per_subgroup)
    if not rows:
        return table
    extra = pl.DataFrame([{c: r.get(c) for c in NC_ECE_REPORT_SCHEMA} for r in rows], schema=NC_ECE_REPORT_SCHEMA)
    return pl.concat([table, extra])


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
    (`recalibration_tables.recalibrators_table`, seed 000 §5, §E.2, §E.5); multi-class: temperature scaling
    and the classwise projected histogram (`class_tables.class_recalibrators_table`)."""
    if is_multiclass(predictions):
        return class_recalibrators_table(*_class_inputs(annotations, predictions, channel_estimates), n_bins, seed)
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
    (`recalibration_tables.recalibration_report_table`, seed 000 §E.4; multi-class:
    `class_tables.class_recalibration_report_table`)."""
    if is_multiclass(predictions):
        return class_recalibration_report_table(class_matrix(annotations, predictions), recalibrators, n_bins)
    refs: Any = references if references is not None and references.height else None
    return recalibration_report_table(
        _matrix(annotations, predictions), recalibrators, channel_estimates, references=refs, n_bins=n_bins
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
    binary version, `report.render_multiclass_report` for a multi-class one; both end with the subgroups."""
    from .report import calibration_summary_markdown, render_calibration_report, render_multiclass_report

    summary = calibration_summary_markdown(channel_estimates, nc_ece_report, recalibration_report, model_version)
    if is_multiclass(predictions):
        cm, ct = _class_inputs(annotations, predictions, channel_estimates)
        text = render_multiclass_report(cm, ct, channel_estimates, nc_ece_report, predictions, recalibration_report,
                                        model_version, n_bins, nc_ece_limit, min_items_per_subgroup)
        return text, summary
    refs = references if references is not None and references.height else None
    text = render_calibration_report(
        _matrix(annotations, predictions), channel_estimates, nc_ece_report, recalibrators, recalibration_report,
        refs, model_version=model_version, n_bins=n_bins, nc_ece_limit=nc_ece_limit, predictions=predictions,
        min_items=min_items_per_subgroup,
    )
    return text, summary
