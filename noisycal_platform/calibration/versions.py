"""A model version's label space, decided once: `version` reads a version's annotations and predictions and
returns a `BinaryVersion` (scores, 0/1 labels, channels (a_j, b_j)) or a `MulticlassVersion` (C class
probabilities, class labels, C×C confusion matrices). Both have the same methods, one per calibration step:

- ``estimate_channels`` → the channel table (calibration/channel_estimates),
- ``nc_ece_table`` → NC-ECE, its test and the naive ECEs (calibration/nc_ece_report), using ``test``,
- ``recalibrate`` → fitted recalibrators (calibration/recalibrators),
- ``recalibration_report`` → the recalibrators on held-out items (calibration/recalibration_report),
- ``report`` → the HTML report (reports/calibration),
- ``summary`` → its markdown summary (the asset's metadata),

so the assets and the report code never ask which label space a version has. The annotation matrix is built
and validated once, in `version`, and carried by the object; a step parses its channel table once
(``channels``) and hands the parsed table on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import polars as pl

from ..contracts import BINARY_CLASSES
from .class_tables import (
    ClassMatrix,
    ConfusionTable,
    class_channel_rows,
    class_matrix,
    class_nc_ece_rows,
    class_recalibration_report_table,
    class_recalibrators_table,
    confusion_from_table,
    is_multiclass,
    multiclass_test,
    scored_annotations,
)
from .diagnostics import assumption_checks
from .inference import CalibrationTest, calibration_test
from .recalibration_tables import recalibration_report_table, recalibrators_table
from .report import (
    BINARY_SUMMARY,
    MULTICLASS_SUMMARY,
    calibration_summary_markdown,
    render_calibration_report,
    render_multiclass_report,
)
from .subgroups import binary_subgroup_rows, class_subgroup_rows
from .tables import (
    CHANNEL_TABLE_SCHEMA,
    NC_ECE_REPORT_SCHEMA,
    AnnotationMatrix,
    ChannelTable,
    annotation_matrix,
    calibration_test_arguments,
    channel_estimates_table,
    channels_from_table,
    nc_ece_calibration_test,
    nc_ece_report_settings,
    nc_ece_report_table,
)

__all__ = ["ASSUMPTION_COLUMNS", "BinaryVersion", "MulticlassVersion", "Version", "version"]

ASSUMPTION_COLUMNS = {
    "independence_statistic": pl.Float64,
    "independence_p_value": pl.Float64,
    "invariance_statistic": pl.Float64,
    "invariance_p_value": pl.Float64,
    "assumption_note": pl.Utf8,
}
_MULTICLASS_NOTE = "the independence and score-invariance checks are defined for binary channels; not run for C classes"


def _with_assumptions(table: pl.DataFrame, values: dict[str, Any]) -> pl.DataFrame:
    return table.with_columns(pl.lit(values[c], dtype=t).alias(c) for c, t in ASSUMPTION_COLUMNS.items())


def _report_frame(rows: list[dict[str, Any]]) -> pl.DataFrame:
    return pl.DataFrame([{c: r.get(c) for c in NC_ECE_REPORT_SCHEMA} for r in rows], schema=NC_ECE_REPORT_SCHEMA)


def _references(references: pl.DataFrame | None) -> pl.DataFrame | None:
    return references if references is not None and references.height else None


def binary_matrix(annotations: pl.DataFrame, predictions: pl.DataFrame) -> AnnotationMatrix:
    """The binary version's annotation matrix. An annotation of a scored item whose label is not 0/1 (a class
    name, stored with a null ``label``) raises `UnknownLabelError` with its file, row and column; such labels
    on other items (a multi-class version's) are left out."""
    if "label_text" in annotations.columns:
        scored_annotations(annotations, predictions, list(BINARY_CLASSES))
        annotations = annotations.filter(pl.col("label").is_not_null())
    return annotation_matrix(annotations, predictions.select("item_id", "score"))


@dataclass(frozen=True, eq=False)
class BinaryVersion:
    """A binary model version: scores in [0, 1], labels 0/1, channels (a_j, b_j) (Hanada and Futami 2026)."""

    kind: ClassVar[str] = "binary"
    #: channel-table columns that summarise the channels (the asset's metadata table)
    channel_columns: ClassVar[tuple[str, ...]] = ("annotator_id", "fpr", "fnr", "gap", "weight")
    predictions: pl.DataFrame
    matrix: AnnotationMatrix

    def channels(self, channel_table: pl.DataFrame) -> ChannelTable:
        """The channel table read back (`tables.channels_from_table`)."""
        return channels_from_table(channel_table)

    def estimate_channels(
        self, *, method: str = "auto", weights: str = "iv", n_bins: int = 15, seed: int = 0,
        n_check_replicates: int = 200,
    ) -> pl.DataFrame:
        """`tables.channel_estimates_table` plus the two assumption checks of §D.7 (`diagnostics.assumption_checks`:
        statistic and bootstrap p-value, repeated on every row)."""
        m = self.matrix
        table = channel_estimates_table(m, method=method, weights=weights, n_bins=n_bins, seed=seed)
        checks = assumption_checks(m.values, m.scores, n_replicates=n_check_replicates, seed=seed)
        return _with_assumptions(table, {
            "independence_statistic": checks.independence_statistic,
            "independence_p_value": checks.independence_p_value,
            "invariance_statistic": checks.invariance_statistic,
            "invariance_p_value": checks.invariance_p_value,
            "assumption_note": checks.note,
        })

    def test(
        self, channels: ChannelTable, *, n_bins: int = 15, n_bootstrap: int = 500, ci_level: float = 0.95,
        seed: int = 0,
    ) -> CalibrationTest:
        """The calibration test with the stored channels as point estimate (`tables.nc_ece_calibration_test`)."""
        row = {"n_bins": n_bins, "n_bootstrap": n_bootstrap, "ci_level": ci_level, "seed": seed}
        return nc_ece_calibration_test(self.matrix, channels, row)

    def nc_ece_table(
        self, channel_table: pl.DataFrame, *, n_bins: int = 15, n_bootstrap: int = 500, seed: int = 0,
        min_items_per_subgroup: int = 200, n_bootstrap_subgroups: int | None = None,
    ) -> pl.DataFrame:
        """The headline `inference.calibration_test` (Hanada and Futami 2026 §3, §C; one computation), the
        `tables.nc_ece_report_table` built around it, then the subgroup rows (`subgroups.binary_subgroup_rows`) with
        ``n_bootstrap_subgroups`` replicates (None: ``n_bootstrap``)."""
        ct = self.channels(channel_table)
        n_sub = n_bootstrap if n_bootstrap_subgroups is None else n_bootstrap_subgroups
        settings = nc_ece_report_settings(self.matrix, n_bins=n_bins, n_bootstrap=n_bootstrap, seed=seed)
        test = calibration_test(**calibration_test_arguments(self.matrix, ct, settings)) if n_bootstrap else None
        table = nc_ece_report_table(self.matrix, ct, n_bins=n_bins, n_bootstrap=n_bootstrap, seed=seed, test=test)
        chans, w = ct.for_matrix(self.matrix)
        rows = binary_subgroup_rows(self.matrix, self.predictions, chans, w, n_bins=n_bins, n_bootstrap=n_sub,
                                    seed=seed, min_items=min_items_per_subgroup)
        return pl.concat([table, _report_frame(rows)]) if rows else table

    def recalibrate(
        self, channel_table: pl.DataFrame, *, n_bins: int = 15, method: str = "auto", seed: int = 0
    ) -> pl.DataFrame:
        """`recalibration_tables.recalibrators_table` (Hanada and Futami 2026 §5, §E.2, §E.5)."""
        ct = self.channels(channel_table)
        return recalibrators_table(self.matrix, ct, n_bins=n_bins, method=method, seed=seed)

    def recalibration_report(
        self, channel_table: pl.DataFrame, recalibrators: pl.DataFrame, references: pl.DataFrame | None = None,
        *, n_bins: int = 15,
    ) -> pl.DataFrame:
        """`recalibration_tables.recalibration_report_table` (Hanada and Futami 2026 §E.4)."""
        return recalibration_report_table(self.matrix, recalibrators, self.channels(channel_table),
                                          references=_references(references), n_bins=n_bins)

    def summary(
        self, channel_table: pl.DataFrame, nc_ece_report: pl.DataFrame,
        recalibration_report: pl.DataFrame | None = None, model_version: str = "",
    ) -> str:
        """`report.calibration_summary_markdown` with the binary channel table (`report.BINARY_SUMMARY`)."""
        return calibration_summary_markdown(
            channel_table, nc_ece_report, recalibration_report, model_version, layout=BINARY_SUMMARY
        )

    def report(
        self, channel_table: pl.DataFrame, nc_ece_report: pl.DataFrame, recalibrators: pl.DataFrame,
        recalibration_report: pl.DataFrame, references: pl.DataFrame | None = None, *, model_version: str = "",
        n_bins: int = 15, nc_ece_limit: float | None = None, min_items_per_subgroup: int | None = None,
    ) -> str:
        """`report.render_calibration_report`."""
        return render_calibration_report(
            self.matrix, channel_table, nc_ece_report, recalibrators, recalibration_report,
            _references(references), model_version=model_version, n_bins=n_bins, nc_ece_limit=nc_ece_limit,
            predictions=self.predictions, min_items=min_items_per_subgroup,
        )


@dataclass(frozen=True, eq=False)
class MulticlassVersion:
    """A multi-class model version: C class probabilities, class labels, C×C confusion matrices (`class_tables`)."""

    kind: ClassVar[str] = "multiclass"
    channel_columns: ClassVar[tuple[str, ...]] = (
        "annotator_id", "true_class", "answered_class", "probability", "gap", "weight"
    )
    predictions: pl.DataFrame
    matrix: ClassMatrix

    def channels(self, channel_table: pl.DataFrame) -> ConfusionTable:
        """The long channel table read back (`class_tables.confusion_from_table`)."""
        return confusion_from_table(channel_table, self.matrix.classes)

    def estimate_channels(
        self, *, method: str = "auto", weights: str = "iv", n_bins: int = 15, seed: int = 0,
        n_check_replicates: int = 200,
    ) -> pl.DataFrame:
        """Confusion matrices by multi-class Dawid–Skene (`class_tables.class_channel_rows`; ``method`` and
        ``n_check_replicates`` are not used: Dawid–Skene is the one estimator, and the two assumption checks are
        defined for binary channels, so they are left null with a note)."""
        rows, _ = class_channel_rows(self.matrix, weights=weights, n_bins=n_bins, seed=seed)
        return _with_assumptions(pl.DataFrame(rows, schema=CHANNEL_TABLE_SCHEMA),
                                 {c: None for c in ASSUMPTION_COLUMNS} | {"assumption_note": _MULTICLASS_NOTE})

    def test(
        self, channels: ConfusionTable, *, kind: str = "top_label", weights: Any = "iv", n_bins: int = 15,
        n_bootstrap: int = 500, ci_level: float = 0.95, seed: int = 0, refit: bool = True,
    ) -> CalibrationTest | None:
        """The multi-class calibration test of one kind (`class_tables.multiclass_test`)."""
        ct = channels.for_matrix(self.matrix)
        return multiclass_test(self.matrix, ct, kind, weights, n_bins, n_bootstrap, ci_level, seed, refit)

    def nc_ece_table(
        self, channel_table: pl.DataFrame, *, n_bins: int = 15, n_bootstrap: int = 500, seed: int = 0,
        min_items_per_subgroup: int = 200, n_bootstrap_subgroups: int | None = None,
    ) -> pl.DataFrame:
        """Top-label and classwise rows (`class_tables.class_nc_ece_rows`), then the subgroup rows
        (`subgroups.class_subgroup_rows`) with ``n_bootstrap_subgroups`` replicates (None: ``n_bootstrap``)."""
        ct = self.channels(channel_table)
        n_sub = n_bootstrap if n_bootstrap_subgroups is None else n_bootstrap_subgroups
        rule = str(channel_table["weight_rule"][0])
        rows = class_nc_ece_rows(self.matrix, ct, n_bins=n_bins, n_bootstrap=n_bootstrap, seed=seed,
                                 weight_rule=rule)
        rows += class_subgroup_rows(self.matrix, self.predictions, ct, n_bins=n_bins, n_bootstrap=n_sub, seed=seed,
                                    min_items=min_items_per_subgroup)
        return _report_frame(rows)

    def recalibrate(
        self, channel_table: pl.DataFrame, *, n_bins: int = 15, method: str = "auto", seed: int = 0
    ) -> pl.DataFrame:
        """Temperature scaling and the classwise projected histogram (`class_tables.class_recalibrators_table`;
        ``method`` is not used)."""
        return class_recalibrators_table(self.matrix, self.channels(channel_table), n_bins, seed)

    def recalibration_report(
        self, channel_table: pl.DataFrame, recalibrators: pl.DataFrame, references: pl.DataFrame | None = None,
        *, n_bins: int = 15,
    ) -> pl.DataFrame:
        """`class_tables.class_recalibration_report_table` (the channels stored with the recalibrators; reference
        labels are binary by contract and not used)."""
        return class_recalibration_report_table(self.matrix, recalibrators, n_bins)

    def summary(
        self, channel_table: pl.DataFrame, nc_ece_report: pl.DataFrame,
        recalibration_report: pl.DataFrame | None = None, model_version: str = "",
    ) -> str:
        """`report.calibration_summary_markdown` with the confusion-matrix gaps and the NC-ECE kinds
        (`report.MULTICLASS_SUMMARY`)."""
        return calibration_summary_markdown(
            channel_table, nc_ece_report, recalibration_report, model_version, layout=MULTICLASS_SUMMARY
        )

    def report(
        self, channel_table: pl.DataFrame, nc_ece_report: pl.DataFrame, recalibrators: pl.DataFrame,
        recalibration_report: pl.DataFrame, references: pl.DataFrame | None = None, *, model_version: str = "",
        n_bins: int = 15, nc_ece_limit: float | None = None, min_items_per_subgroup: int | None = None,
    ) -> str:
        """`report.render_multiclass_report`."""
        return render_multiclass_report(
            self.matrix, self.channels(channel_table), channel_table, nc_ece_report, self.predictions,
            recalibration_report, model_version, n_bins, nc_ece_limit, min_items_per_subgroup,
        )


Version = BinaryVersion | MulticlassVersion


def version(annotations: pl.DataFrame, predictions: pl.DataFrame) -> Version:
    """One model version's annotations and predictions as a `BinaryVersion` or a `MulticlassVersion`: the one
    place the label space is decided (multi-class when the predictions carry ``classes``,
    `class_tables.is_multiclass`). The matrix is built and validated here, once. A label that is not a class of
    the version raises `class_tables.UnknownLabelError` naming its file, row and column."""
    if is_multiclass(predictions):
        return MulticlassVersion(predictions, class_matrix(annotations, predictions))
    return BinaryVersion(predictions, binary_matrix(annotations, predictions))
