"""Calibration stage (seed 000), one partition per model version.

raw/annotations + raw/predictions[v] -> channel_estimates[v] -> nc_ece_report[v] -> recalibrators[v]
-> recalibration_report[v]. Each body reads, calls ``noisycal_platform.calibration.pipeline`` and returns.
"""

import json

import dagster as dg
import polars as pl

from assets.policy import CALIBRATION
from assets.raw import ANNOTATIONS, PREDICTIONS, REFERENCE_LABELS
from noisycal_platform.calibration import NotIdentifiableError
from noisycal_platform.calibration import pipeline as cal
from noisycal_platform.io import atomic_write_text
from resources.inbox import InboxResource
from resources.settings import SettingsResource

CHANNEL_ESTIMATES = CALIBRATION.key("channel_estimates")
NC_ECE_REPORT = CALIBRATION.key("nc_ece_report")
RECALIBRATORS = CALIBRATION.key("recalibrators")
RECALIBRATION_REPORT = CALIBRATION.key("recalibration_report")


def _matrix(annotations: pl.DataFrame, predictions: pl.DataFrame) -> "cal.AnnotationMatrix":
    return cal.annotation_matrix(annotations, predictions.select("item_id", "score"))


def _md_table(frame: pl.DataFrame, columns: list[str], digits: int = 4) -> str:
    rows = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for r in frame.select(columns).iter_rows():
        rows.append("| " + " | ".join(f"{v:.{digits}f}" if isinstance(v, float) else str(v) for v in r) + " |")
    return "\n".join(rows)


@CALIBRATION.asset(
    ins={"annotations": dg.AssetIn(ANNOTATIONS), "predictions": dg.AssetIn(PREDICTIONS)},
    description="Estimated annotator channels (FPR a_j, FNR b_j, gap δ_j), aggregation weights and fit "
    "diagnostics for the items this model version scored (seed 000 §4).",
)
def channel_estimates(
    context: dg.AssetExecutionContext,
    annotations: pl.DataFrame,
    predictions: pl.DataFrame,
    settings: SettingsResource,
) -> dg.Output[pl.DataFrame]:
    matrix = _matrix(annotations, predictions)
    try:
        table = cal.channel_estimates_table(
            matrix,
            method=settings.channel_method,
            weights=settings.weight_rule,
            n_bins=settings.n_bins,
            seed=settings.seed,
        )
    except NotIdentifiableError as exc:
        raise dg.Failure(description=f"channels not identifiable for {context.partition_key}: {exc}") from None
    return dg.Output(
        CALIBRATION.tag(table, context.partition_key),
        metadata={
            "method": str(table["method"][0]),
            "converged": bool(table["converged"].all()),
            "min_gap": float(table["min_gap"][0]),
            "prevalence": float(table["prevalence"][0]),
            "channels": dg.MetadataValue.md(_md_table(table, ["annotator_id", "fpr", "fnr", "gap", "weight"])),
        },
    )


@CALIBRATION.asset(
    ins={"annotations": dg.AssetIn(ANNOTATIONS), "predictions": dg.AssetIn(PREDICTIONS)},
    description="NC-ECE with a bootstrap CI beside naive ECE under majority vote, soft vote and each "
    "single annotator (seed 000 §3, §6).",
)
def nc_ece_report(
    context: dg.AssetExecutionContext,
    annotations: pl.DataFrame,
    predictions: pl.DataFrame,
    channel_estimates: pl.DataFrame,
    settings: SettingsResource,
) -> dg.Output[pl.DataFrame]:
    matrix = _matrix(annotations, predictions)
    table = cal.nc_ece_report_table(
        matrix,
        channel_estimates,
        n_bins=settings.n_bins,
        n_bootstrap=settings.n_bootstrap,
        seed=settings.seed,
    )
    nc = table.filter(pl.col("estimator") == "nc_ece").row(0, named=True)
    return dg.Output(
        CALIBRATION.tag(table, context.partition_key),
        metadata={
            "nc_ece": float(nc["value"]),
            "nc_ece_ci": f"[{nc['ci_low']:.4f}, {nc['ci_high']:.4f}]",
            "n_items": int(nc["n_items"]),
            "estimators": dg.MetadataValue.md(
                _md_table(table, ["estimator", "annotator_id", "value", "ci_low", "ci_high"])
            ),
        },
    )


@CALIBRATION.asset(
    ins={"annotations": dg.AssetIn(ANNOTATIONS), "predictions": dg.AssetIn(PREDICTIONS)},
    description="Corrected-loss Platt/temperature and projected-histogram recalibrators, plus the naive "
    "baselines; parameters as JSON (exports/recalibrators/<version>/), never pickles (§5).",
)
def recalibrators(
    context: dg.AssetExecutionContext,
    annotations: pl.DataFrame,
    predictions: pl.DataFrame,
    channel_estimates: pl.DataFrame,
    inbox: InboxResource,
    settings: SettingsResource,
) -> dg.Output[pl.DataFrame]:
    matrix = _matrix(annotations, predictions)
    table = cal.recalibrators_table(matrix, channel_estimates, n_bins=settings.n_bins)
    folder = inbox.layout.recalibrator_exports / context.partition_key
    for name, params in cal.recalibrator_exports(table).items():
        atomic_write_text(folder / f"{name}.json", json.dumps(params, indent=1, sort_keys=True))
    return dg.Output(
        CALIBRATION.tag(table, context.partition_key),
        metadata={
            "exported_to": str(folder),
            "fitted": dg.MetadataValue.md(_md_table(table, ["name", "status", "converged", "n_fit"])),
        },
    )


@CALIBRATION.asset(
    ins={
        "annotations": dg.AssetIn(ANNOTATIONS),
        "predictions": dg.AssetIn(PREDICTIONS),
        "reference_labels": dg.AssetIn(REFERENCE_LABELS),
    },
    description="Recalibrators scored on held-out items: NC-ECE, naive ECE and, where clean reference "
    "labels exist, ECE, log loss and Brier score against them.",
)
def recalibration_report(
    context: dg.AssetExecutionContext,
    annotations: pl.DataFrame,
    predictions: pl.DataFrame,
    channel_estimates: pl.DataFrame,
    recalibrators: pl.DataFrame,
    reference_labels: pl.DataFrame,
    settings: SettingsResource,
) -> dg.Output[pl.DataFrame]:
    matrix = _matrix(annotations, predictions)
    refs = reference_labels if reference_labels.height else None
    table = cal.recalibration_report_table(
        matrix, recalibrators, channel_estimates, references=refs, n_bins=settings.n_bins
    )
    cols = ["name", "n_eval", "nc_ece", "naive_soft_vote_ece"] + (
        ["ece", "log_loss", "brier"] if refs is not None else []
    )
    return dg.Output(
        CALIBRATION.tag(table, context.partition_key), metadata={"table": dg.MetadataValue.md(_md_table(table, cols))}
    )
