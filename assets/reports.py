"""Reports stage: self-contained HTML summaries (``$NOISYCAL_HOME/reports/``) and a row per file in DuckDB.

Each report asset is unpartitioned and reads every partition of the stage it summarises.
"""

import hashlib
import html
from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
import polars as pl

from assets.calibration import CHANNEL_ESTIMATES, NC_ECE_REPORT, RECALIBRATION_REPORT, RECALIBRATORS
from assets.policy import DUCKDB_POOL, EAGER, MODEL_VERSION_COLUMN
from assets.raw import ANNOTATIONS, PREDICTIONS, REFERENCE_LABELS
from noisycal_platform.calibration import pipeline as cal
from noisycal_platform.calibration.report import calibration_summary_markdown, render_calibration_report
from noisycal_platform.io import atomic_write_text
from noisycal_platform.paths import HomeLayout
from resources.inbox import InboxResource
from resources.settings import SettingsResource

STAGE = "reports"
REPORT_SCHEMA = {
    "report": pl.String,
    "scope": pl.String,
    "path": pl.String,
    "sha256": pl.String,
    "created": pl.String,
}


def _write(path: Path, text: str) -> dict:
    atomic_write_text(path, text)
    return {"path": str(path), "sha256": hashlib.sha256(text.encode()).hexdigest()}


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _publish(layout: HomeLayout, report: str, scope: str, text: str, created: str) -> pl.DataFrame:
    """Write ``reports/<report>.html`` atomically, refresh the index, and return the one-row table entry."""
    written = _write(layout.reports / f"{report}.html", text)
    write_index(layout)
    return pl.DataFrame([{"report": report, "scope": scope, "created": created, **written}], schema=REPORT_SCHEMA)


def write_index(layout: HomeLayout) -> Path:
    """``reports/index.html`` linking every report file present (rewritten by each report asset)."""
    files = sorted(p for p in layout.reports.rglob("*.html") if p.name != "index.html")
    items = "\n".join(
        f'<li><a href="{html.escape(str(p.relative_to(layout.reports)))}">'
        f"{html.escape(str(p.relative_to(layout.reports)))}</a></li>"
        for p in files
    )
    text = (
        "<!doctype html><html><head><meta charset='utf-8'><title>noisycal reports</title>"
        "<style>body{font-family:system-ui,sans-serif;max-width:50rem;margin:2rem auto}</style></head><body>"
        f"<h1>noisycal-platform reports</h1><p>Home: <code>{html.escape(str(layout.home))}</code></p>"
        f"<ul>{items}</ul></body></html>"
    )
    path = layout.reports / "index.html"
    atomic_write_text(path, text)
    return path


@dg.asset(
    key_prefix=STAGE,
    group_name=STAGE,
    pool=DUCKDB_POOL,
    kinds={"polars", "duckdb", "html"},
    automation_condition=EAGER,
    ins={
        "annotations": dg.AssetIn(ANNOTATIONS),
        "predictions": dg.AssetIn(PREDICTIONS),
        "reference_labels": dg.AssetIn(REFERENCE_LABELS),
        "channel_estimates": dg.AssetIn(CHANNEL_ESTIMATES),
        "nc_ece_report": dg.AssetIn(NC_ECE_REPORT),
        "recalibrators": dg.AssetIn(RECALIBRATORS),
        "recalibration_report": dg.AssetIn(RECALIBRATION_REPORT),
    },
    description="HTML calibration report per model version: reliability diagrams, channel table, NC-ECE vs "
    "naive ECE, recalibration results (reports/calibration/<version>.html).",
)
def calibration(
    annotations: pl.DataFrame,
    predictions: pl.DataFrame,
    reference_labels: pl.DataFrame,
    channel_estimates: pl.DataFrame,
    nc_ece_report: pl.DataFrame,
    recalibrators: pl.DataFrame,
    recalibration_report: pl.DataFrame,
    inbox: InboxResource,
    settings: SettingsResource,
) -> dg.Output[pl.DataFrame]:
    layout = inbox.layout
    created = _now()
    rows, summaries = [], []
    # an empty upstream (no model version registered yet) loads as a frame without columns
    has_versions = MODEL_VERSION_COLUMN in channel_estimates.columns
    versions = sorted(channel_estimates[MODEL_VERSION_COLUMN].unique().to_list()) if has_versions else []
    for version in versions:

        def part(frame: pl.DataFrame, v: str = version) -> pl.DataFrame:
            return frame.filter(pl.col(MODEL_VERSION_COLUMN) == v).drop(MODEL_VERSION_COLUMN)

        matrix = cal.annotation_matrix(annotations, part(predictions).select("item_id", "score"))
        text = render_calibration_report(
            matrix,
            part(channel_estimates),
            part(nc_ece_report),
            part(recalibrators),
            part(recalibration_report),
            reference_labels if reference_labels.height else None,
            model_version=version,
            n_bins=settings.n_bins,
            nc_ece_limit=settings.nc_ece_limit,
        )
        written = _write(layout.reports / "calibration" / f"{version}.html", text)
        rows.append({"report": "calibration", "scope": version, "created": created, **written})
        summaries.append(
            calibration_summary_markdown(
                part(channel_estimates),
                part(nc_ece_report),
                part(recalibration_report),
                model_version=version,
            )
        )
    write_index(layout)
    frame = pl.DataFrame(rows, schema=REPORT_SCHEMA)
    return dg.Output(
        frame,
        metadata={
            "versions": len(versions),
            "files": dg.MetadataValue.md("\n".join(f"- `{r['path']}`" for r in rows) or "none"),
            "summary": dg.MetadataValue.md("\n\n".join(summaries) or "no model version yet"),
        },
    )


CLEANING_INPUTS = {
    name: dg.AssetIn(dg.AssetKey(["cleaning", name]))
    for name in (
        "confirmation_queue",
        "confirmed_issues",
        "label_error_prevalence",
        "agreement",
        "ranking_quality",
        "ranking_vs_truth",
        "annotation_speedup",
        "cleaning_impact",
        "stopping_sensitivity",
        "expert_lay_tests",
    )
}


@dg.asset(
    key_prefix=STAGE,
    group_name=STAGE,
    pool=DUCKDB_POOL,
    kinds={"polars", "duckdb", "html"},
    automation_condition=EAGER,
    ins={"images": dg.AssetIn(dg.AssetKey(["raw", "images"])), **CLEANING_INPUTS},
    description="HTML cleaning report (reports/cleaning.html): issue table per dataset and rule (seed 001 Table 1), "
    "agreement with CIs, ranking quality (and vs known truth), speed-up, impact on model metrics, "
    "stopping-rule sensitivity, expert vs lay, top candidates as thumbnails.",
)
def cleaning(
    images: pl.DataFrame,
    confirmation_queue: pl.DataFrame,
    confirmed_issues: pl.DataFrame,
    label_error_prevalence: pl.DataFrame,
    agreement: pl.DataFrame,
    ranking_quality: pl.DataFrame,
    ranking_vs_truth: pl.DataFrame,
    annotation_speedup: pl.DataFrame,
    cleaning_impact: pl.DataFrame,
    stopping_sensitivity: pl.DataFrame,
    expert_lay_tests: pl.DataFrame,
    inbox: InboxResource,
) -> dg.Output[pl.DataFrame]:
    from noisycal_platform.cleaning import pipeline as cp

    layout = inbox.layout
    created = _now()
    if "dataset" not in images.columns:  # no dataset registered yet: every upstream is an empty frame
        frame = _publish(layout, "cleaning", "", cp.render_cleaning_report(created=created), created)
        return dg.Output(frame, metadata={"path": frame["path"][0], "datasets": 0})
    sizes = {
        r["dataset"]: int(r["n"]) for r in images.group_by("dataset").agg(pl.len().alias("n")).iter_rows(named=True)
    }
    roots = {r["dataset"]: r["root"] for r in images.select("dataset", "root").unique().iter_rows(named=True)}
    text = cp.render_cleaning_report(
        issues=cp.issue_table(confirmed_issues, sizes),
        prevalence=label_error_prevalence,
        agreement=agreement,
        ranking_quality=ranking_quality,
        ranking_truth=ranking_vs_truth,
        speedup=annotation_speedup.drop("dataset").rename({"scope": "dataset"}),
        impact=cleaning_impact,
        sensitivity=stopping_sensitivity,
        expert_lay=expert_lay_tests,
        queue=confirmation_queue,
        confirmed=confirmed_issues,
        dataset_roots=roots,
        created=created,
    )
    frame = _publish(layout, "cleaning", ",".join(sorted(sizes)), text, created)
    return dg.Output(frame, metadata={"path": frame["path"][0], "datasets": len(sizes)})


@dg.asset(
    key_prefix=STAGE,
    group_name=STAGE,
    pool=DUCKDB_POOL,
    kinds={"polars", "duckdb", "html"},
    automation_condition=EAGER,
    ins={
        name: dg.AssetIn(dg.AssetKey(["correctness", name]))
        for name in ("criterion_audit", "ue_sensitivity", "false_acceptance")
    },
    description="HTML correctness report (reports/correctness.html): H_f vs F_f per task, the AUROC table with "
    "reversals highlighted, false acceptance by error category.",
)
def correctness(
    criterion_audit: pl.DataFrame,
    ue_sensitivity: pl.DataFrame,
    false_acceptance: pl.DataFrame,
    inbox: InboxResource,
) -> dg.Output[pl.DataFrame]:
    from noisycal_platform.correctness.report import render_correctness_report

    layout = inbox.layout
    synthetic = (layout.generations.parent / "SYNTHETIC").is_file()
    created = _now()
    text = render_correctness_report(
        criterion_audit, ue_sensitivity, false_acceptance, synthetic=synthetic, created=created
    )
    frame = _publish(layout, "correctness", "all", text, created)
    return dg.Output(frame, metadata={"path": frame["path"][0], "synthetic_inputs": synthetic})
