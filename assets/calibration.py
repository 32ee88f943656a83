"""Calibration stage (Hanada and Futami 2026), one partition per model version.

raw/annotations + raw/predictions[v] -> channel_estimates[v] -> nc_ece_report[v] -> recalibrators[v]
-> recalibration_report[v]. Each body reads, calls its step's method of the version object
(``noisycal_platform.calibration.versions.version``: binary or multi-class, decided there once) and returns.
"""

import json

import dagster as dg
import polars as pl

from assets.policy import CALIBRATION
from assets.raw import ANNOTATIONS, PREDICTIONS, REFERENCE_LABELS
from noisycal_platform.calibration import NotIdentifiableError
from noisycal_platform.calibration.class_tables import UnknownLabelError
from noisycal_platform.calibration.recalibration_tables import (
    RECALIBRATION_REPORT_SCHEMA,
    RECALIBRATORS_SCHEMA,
    recalibrator_exports,
)
from noisycal_platform.calibration.tables import CHANNEL_TABLE_SCHEMA, NC_ECE_REPORT_SCHEMA
from noisycal_platform.calibration.versions import ASSUMPTION_COLUMNS, version
from noisycal_platform.files import atomic_write_text
from resources.inbox import InboxResource
from resources.settings import SettingsResource

CHANNEL_ESTIMATES = CALIBRATION.key("channel_estimates")
NC_ECE_REPORT = CALIBRATION.key("nc_ece_report")
RECALIBRATORS = CALIBRATION.key("recalibrators")
RECALIBRATION_REPORT = CALIBRATION.key("recalibration_report")
# what every calibration asset reads from the raw stage: the annotations, and the predictions of its version
SCORED_INS = {"annotations": dg.AssetIn(ANNOTATIONS), "predictions": dg.AssetIn(PREDICTIONS)}
#: calibration/channel_estimates: the channel table and the two assumption checks repeated on every row
CHANNEL_ESTIMATES_SCHEMA = {**CHANNEL_TABLE_SCHEMA, **ASSUMPTION_COLUMNS}


#: pipeline keyword → SettingsResource field, where the two names differ
_SETTING_FIELD = {"method": "channel_method", "weights": "weight_rule"}


def _settings(settings: SettingsResource, *keywords: str) -> dict:
    """The clinic's settings as the pipeline functions' keyword arguments (``_SETTING_FIELD`` maps names)."""
    return {k: getattr(settings, _SETTING_FIELD.get(k, k)) for k in keywords}


def _md_table(frame: pl.DataFrame, columns: list[str], digits: int = 4) -> str:
    rows = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for r in frame.select(columns).iter_rows():
        rows.append("| " + " | ".join(f"{v:.{digits}f}" if isinstance(v, float) else str(v) for v in r) + " |")
    return "\n".join(rows)


@CALIBRATION.asset(
    ins=SCORED_INS,
    schema=CHANNEL_ESTIMATES_SCHEMA,
    description="Estimated annotator channels (FPR a_j, FNR b_j, gap δ_j), aggregation weights and fit "
    "diagnostics for the items this model version scored (Hanada and Futami 2026 §4).",
)
def channel_estimates(
    context: dg.AssetExecutionContext,
    annotations: pl.DataFrame,
    predictions: pl.DataFrame,
    settings: SettingsResource,
) -> dg.Output[pl.DataFrame]:
    try:
        v = version(annotations, predictions)
        table = v.estimate_channels(**_settings(settings, "method", "weights", "n_bins", "seed"))
    except NotIdentifiableError as exc:
        raise dg.Failure(description=f"channels not identifiable for {context.partition_key}: {exc}") from None
    except UnknownLabelError as exc:  # an input error: retrying cannot fix it
        raise dg.Failure(description=str(exc), allow_retries=False) from None
    return dg.Output(table, metadata=_float_metadata(table.row(0, named=True), _CHANNEL_METADATA) | {
        "method": str(table["method"][0]),
        "converged": bool(table["converged"].all()),
        "n_classes": int(table["n_classes"][0]),
        "channels": dg.MetadataValue.md(_md_table(table, list(v.channel_columns))),
    })


_NC_METADATA = {  # metadata key → nc_ece row column (NaN when null: no bootstrap ran, or no test for the kind)
    "nc_ece": "value",
    "nc_ece_debiased": "value_debiased",
    "ci_low": "ci_low",
    "ci_high": "ci_high",
    "p_value": "p_value",
    "null_q95": "null_q95",
}
_CHANNEL_METADATA = {  # metadata key → channel table column of its first row
    "min_gap": "min_gap",
    "prevalence": "prevalence",
    "independence_p_value": "independence_p_value",
    "invariance_p_value": "invariance_p_value",
}


def _float_metadata(row: dict, columns: dict[str, str]) -> dict[str, float]:
    """``{key: float(row[column])}``, NaN where the value is null."""
    return {k: float("nan") if row[c] is None else float(row[c]) for k, c in columns.items()}


@CALIBRATION.asset(
    ins=SCORED_INS,
    schema=NC_ECE_REPORT_SCHEMA,
    description="NC-ECE (plug-in and debiased) with an interval and a calibration test whose replicates "
    "re-estimate the channels, beside naive ECE under majority vote, soft vote and each single annotator "
    "(Hanada and Futami 2026 §3, §C, §6).",
)
def nc_ece_report(
    annotations: pl.DataFrame,
    predictions: pl.DataFrame,
    channel_estimates: pl.DataFrame,
    settings: SettingsResource,
) -> dg.Output[pl.DataFrame]:
    table = version(annotations, predictions).nc_ece_table(
        channel_estimates,
        **_settings(settings, "n_bins", "n_bootstrap", "seed", "min_items_per_subgroup", "n_bootstrap_subgroups"),
    )
    nc = table.filter(pl.col("estimator") == "nc_ece").row(0, named=True)
    return dg.Output(table, metadata=_float_metadata(nc, _NC_METADATA) | {
        "kind": str(nc["kind"]),
        "n_items": int(nc["n_items"]),
        "subgroups_flagged": int(table["flagged"].fill_null(False).sum()),
        "estimators": dg.MetadataValue.md(
            _md_table(table, ["estimator", "kind", "annotator_id", "subgroup_value", "value", "ci_low", "ci_high"])
        ),
    })


@CALIBRATION.asset(
    ins=SCORED_INS,
    schema=RECALIBRATORS_SCHEMA,
    description="Corrected-loss Platt/temperature (inside the compact parameter box) and projected-histogram "
    "recalibrators, plus the naive baselines, fitted with channels from the fit part of the split; parameters as "
    "JSON (exports/recalibrators/<version>/), never pickles (§5, §E.2, §E.5).",
)
def recalibrators(
    context: dg.AssetExecutionContext,
    annotations: pl.DataFrame,
    predictions: pl.DataFrame,
    channel_estimates: pl.DataFrame,
    inbox: InboxResource,
    settings: SettingsResource,
) -> dg.Output[pl.DataFrame]:
    table = version(annotations, predictions).recalibrate(
        channel_estimates, **_settings(settings, "n_bins", "method", "seed")
    )
    folder = inbox.layout.recalibrator_exports / context.partition_key
    for name, params in recalibrator_exports(table).items():
        atomic_write_text(folder / f"{name}.json", json.dumps(params, indent=1, sort_keys=True))
    return dg.Output(
        table,
        metadata={
            "exported_to": str(folder),
            "regime": str(table["regime"][0]) if table.height else "none",
            "fitted": dg.MetadataValue.md(_md_table(table, ["name", "status", "converged", "n_fit"])),
        },
    )


@CALIBRATION.asset(
    ins={**SCORED_INS, "reference_labels": dg.AssetIn(REFERENCE_LABELS)},
    schema=RECALIBRATION_REPORT_SCHEMA,
    description="Recalibrators scored on held-out items with channels not fitted on them (regime column): "
    "NC-ECE, naive ECE and, where clean reference labels exist, ECE, log loss and Brier score (§E.4).",
)
def recalibration_report(
    annotations: pl.DataFrame,
    predictions: pl.DataFrame,
    channel_estimates: pl.DataFrame,
    recalibrators: pl.DataFrame,
    reference_labels: pl.DataFrame,
    settings: SettingsResource,
) -> dg.Output[pl.DataFrame]:
    refs = reference_labels if reference_labels.height else None
    table = version(annotations, predictions).recalibration_report(
        channel_estimates, recalibrators, refs, n_bins=settings.n_bins
    )
    cols = ["name", "n_eval", "nc_ece", "naive_soft_vote_ece"] + (
        ["ece", "log_loss", "brier"] if refs is not None else []
    )
    return dg.Output(table, metadata={"table": dg.MetadataValue.md(_md_table(table, cols))})
