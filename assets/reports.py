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
REPORT_SCHEMA = {"report": pl.String, "scope": pl.String, "path": pl.String, "sha256": pl.String,
                 "created": pl.String}


def _write(path: Path, text: str) -> dict:
    atomic_write_text(path, text)
    return {"path": str(path), "sha256": hashlib.sha256(text.encode()).hexdigest()}


def write_index(layout: HomeLayout) -> Path:
    """``reports/index.html`` linking every report file present (rewritten by each report asset)."""
    files = sorted(p for p in layout.reports.rglob("*.html") if p.name != "index.html")
    items = "\n".join(
        f'<li><a href="{html.escape(str(p.relative_to(layout.reports)))}">'
        f"{html.escape(str(p.relative_to(layout.reports)))}</a></li>" for p in files
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
    key_prefix=STAGE, group_name=STAGE, pool=DUCKDB_POOL, kinds={"polars", "duckdb", "html"},
    automation_condition=EAGER,
    ins={
        "annotations": dg.AssetIn(ANNOTATIONS), "predictions": dg.AssetIn(PREDICTIONS),
        "reference_labels": dg.AssetIn(REFERENCE_LABELS), "channel_estimates": dg.AssetIn(CHANNEL_ESTIMATES),
        "nc_ece_report": dg.AssetIn(NC_ECE_REPORT), "recalibrators": dg.AssetIn(RECALIBRATORS),
        "recalibration_report": dg.AssetIn(RECALIBRATION_REPORT),
    },
    description="HTML calibration report per model version: reliability diagrams, channel table, NC-ECE vs "
                "naive ECE, recalibration results (reports/calibration/<version>.html).",
)
def calibration(annotations: pl.DataFrame, predictions: pl.DataFrame, reference_labels: pl.DataFrame,
                channel_estimates: pl.DataFrame, nc_ece_report: pl.DataFrame, recalibrators: pl.DataFrame,
                recalibration_report: pl.DataFrame, inbox: InboxResource,
                settings: SettingsResource) -> dg.Output[pl.DataFrame]:
    layout = inbox.layout
    created = datetime.now(UTC).isoformat(timespec="seconds")
    rows, summaries = [], []
    versions = sorted(channel_estimates[MODEL_VERSION_COLUMN].unique().to_list())
    for version in versions:
        def part(frame: pl.DataFrame, v: str = version) -> pl.DataFrame:
            return frame.filter(pl.col(MODEL_VERSION_COLUMN) == v).drop(MODEL_VERSION_COLUMN)

        matrix = cal.annotation_matrix(annotations, part(predictions).select("item_id", "score"))
        text = render_calibration_report(
            matrix, part(channel_estimates), part(nc_ece_report), part(recalibrators), part(recalibration_report),
            reference_labels if reference_labels.height else None, model_version=version, n_bins=settings.n_bins,
        )
        written = _write(layout.reports / "calibration" / f"{version}.html", text)
        rows.append({"report": "calibration", "scope": version, "created": created, **written})
        summaries.append(calibration_summary_markdown(part(channel_estimates), part(nc_ece_report),
                                                      part(recalibration_report), model_version=version))
    write_index(layout)
    frame = pl.DataFrame(rows, schema=REPORT_SCHEMA)
    return dg.Output(frame, metadata={
        "versions": len(versions),
        "files": dg.MetadataValue.md("\n".join(f"- `{r['path']}`" for r in rows) or "none"),
        "summary": dg.MetadataValue.md("\n\n".join(summaries) or "no model version yet"),
    })
