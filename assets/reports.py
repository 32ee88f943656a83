"""Reports stage: self-contained HTML summaries (``$NOISYCAL_HOME/reports/``) and a row per file in DuckDB.

Each report asset is unpartitioned and reads every partition of the stage it summarises that exists: one
failing partition leaves the others in the report, and the report lists it with the reason (read from the
instance's run records). Report files are written atomically and made group-readable (0644); every report
leaves a status record from which ``reports/index.html`` is rendered.
"""

import hashlib
import os
from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
import polars as pl

from assets.calibration import CHANNEL_ESTIMATES, NC_ECE_REPORT, RECALIBRATION_REPORT, RECALIBRATORS, SCORED_INS
from assets.policy import CLEANING, CORRECTNESS, MODEL_VERSION_COLUMN, MODEL_VERSIONS, REPORTS
from assets.raw import IMAGES, REFERENCE_LABELS
from noisycal_platform import report_index as ri
from noisycal_platform.calibration import pipeline as cal
from noisycal_platform.cleaning.pipeline import report as cp
from noisycal_platform.files import atomic_write_text
from noisycal_platform.paths import HomeLayout
from noisycal_platform.report_html import fmt_time
from resources.inbox import InboxResource
from resources.settings import SettingsResource

STAGE = REPORTS.name
REPORT_SCHEMA = {
    "report": pl.String,
    "scope": pl.String,
    "path": pl.String,
    "sha256": pl.String,
    "created": pl.String,
}
#: Report files are read by the clinic's group (a web server, a colleague), never written by it.
REPORT_FILE_MODE = 0o644


def _write(path: Path, text: str) -> dict:
    atomic_write_text(path, text)
    os.chmod(path, REPORT_FILE_MODE)
    return {"path": str(path), "sha256": hashlib.sha256(text.encode()).hexdigest()}


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _iso(ts: float | None) -> str | None:
    return None if ts is None else datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds")


def _newest_input(context: dg.AssetExecutionContext, keys: list[dg.AssetKey]) -> str | None:
    """Time of the newest materialisation among ``keys`` (the report's inputs)."""
    stamps = [e.timestamp for k in keys if (e := context.instance.get_latest_materialization_event(k)) is not None]
    return _iso(max(stamps)) if stamps else None


def _latest_run(instance: dg.DagsterInstance, partition: str) -> tuple[bool, str]:
    """(failed, reason) from the latest run tagged with ``partition``: failed (with the first failed step's
    error), in progress, or never run."""
    records = instance.get_run_records(filters=dg.RunsFilter(tags={"dagster/partition": partition}), limit=1)
    if not records:
        return False, "not computed yet (no run for this version so far)"
    rec = records[0]
    run, when = rec.dagster_run, fmt_time(_iso(rec.update_timestamp.timestamp()))
    if run.status == dg.DagsterRunStatus.FAILURE:
        message = ""
        changes = instance.fetch_run_status_changes(
            dg.RunStatusChangeRecordsFilter(dg.DagsterEventType.RUN_FAILURE, after_timestamp=rec.create_timestamp
                                            .timestamp() - 1),
            limit=100,
        )
        for change in changes.records:
            if change.run_id != run.run_id:
                continue
            data = change.event_log_entry.dagster_event.event_specific_data
            step = getattr(data, "first_step_failure_event", None)
            error = step.event_specific_data.error if step is not None else getattr(data, "error", None)
            message = error.message.strip().split(": ", 1)[-1] if error is not None else ""
        return True, f"the latest run ({run.run_id[:8]}, {when}) failed" + (f": {message}" if message else "")
    if run.status in (dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.STARTING):
        return False, f"being computed (run {run.run_id[:8]} {run.status.value.lower()})"
    return False, f"no result although the latest run ({run.run_id[:8]}, {when}) ended {run.status.value.lower()}"


def _missing_versions(instance: dg.DagsterInstance, built: list[str]) -> list[tuple[str, str]]:
    """Registered model versions without a report, and built ones whose latest run failed (shown from their
    last good result), each with the reason."""
    out = []
    for v in sorted(instance.get_dynamic_partitions(MODEL_VERSIONS.name)):
        failed, why = _latest_run(instance, v)
        if v not in built:
            out.append((v, why))
        elif failed:
            out.append((v, f"shown from its last good result; {why}"))
    return out


def write_index(layout: HomeLayout) -> Path:
    """``reports/index.html`` from the stages' status records (rewritten by each report asset)."""
    others = [str(p.relative_to(layout.reports)) for p in layout.reports.rglob("*.html")
              if p != layout.reports / "index.html"]
    text = ri.render_index(ri.read_statuses(layout.reports), home=str(layout.home), other_files=others)
    path = layout.reports / "index.html"
    _write(path, text)
    return path


def _publish_status(layout: HomeLayout, status: ri.StageStatus) -> None:
    os.chmod(ri.write_status(layout.reports, status), REPORT_FILE_MODE)
    write_index(layout)


def _publish(layout: HomeLayout, report: str, scope: str, text: str, created: str) -> pl.DataFrame:
    """Write ``reports/<report>.html`` atomically and return the one-row table entry."""
    written = _write(layout.reports / f"{report}.html", text)
    return pl.DataFrame([{"report": report, "scope": scope, "created": created, **written}], schema=REPORT_SCHEMA)


def _publish_page(
    context: dg.AssetExecutionContext,
    layout: HomeLayout,
    report: str,
    title: str,
    scope: str,
    text: str,
    created: str,
    verdict: str,
    inputs: list[dg.AssetKey],
) -> pl.DataFrame:
    """A one-page stage report: ``reports/<report>.html`` and its status entry (verdict, newest input, link)."""
    frame = _publish(layout, report, scope, text, created)
    _publish_status(layout, ri.StageStatus(
        report=report,
        title=title,
        verdict=[verdict],
        built=created,
        newest_input=_newest_input(context, inputs),
        links=[(f"{report} report", f"{report}.html")],
    ))
    return frame


CALIBRATION_INPUTS = {
    **SCORED_INS,
    "reference_labels": dg.AssetIn(REFERENCE_LABELS),
    "channel_estimates": dg.AssetIn(CHANNEL_ESTIMATES),
    "nc_ece_report": dg.AssetIn(NC_ECE_REPORT),
    "recalibrators": dg.AssetIn(RECALIBRATORS),
    "recalibration_report": dg.AssetIn(RECALIBRATION_REPORT),
}


#: The calibration outputs a model version needs before its report is built; the overview lists the others.
_BUILT_FROM = ("predictions", "channel_estimates", "nc_ece_report")


def _of_version(frame: pl.DataFrame, version: str) -> pl.DataFrame:
    """The rows of one model version without the partition column (a frame without it is returned as is)."""
    if MODEL_VERSION_COLUMN not in frame.columns:
        return frame
    return frame.filter(pl.col(MODEL_VERSION_COLUMN) == version).drop(MODEL_VERSION_COLUMN)


def _built_versions(tables: dict[str, pl.DataFrame]) -> list[str]:
    """Versions with every table of ``_BUILT_FROM``; an upstream never built loads as a frame without columns."""
    present = [
        set(f[MODEL_VERSION_COLUMN].unique().to_list()) if MODEL_VERSION_COLUMN in f.columns else set()
        for f in (tables[name] for name in _BUILT_FROM)
    ]
    return sorted(set.intersection(*present))


def _version_page(tables: dict[str, pl.DataFrame], version: str, settings: SettingsResource) -> tuple[str, str]:
    """(HTML report, markdown summary) of one model version (`calibration.pipeline.calibration_report`)."""
    t = {name: _of_version(frame, version) for name, frame in tables.items()}
    return cal.calibration_report(
        t["annotations"], t["predictions"], t["reference_labels"], t["channel_estimates"], t["nc_ece_report"],
        t["recalibrators"], t["recalibration_report"], model_version=version, n_bins=settings.n_bins,
        nc_ece_limit=settings.nc_ece_limit, min_items_per_subgroup=settings.min_items_per_subgroup,
    )


@REPORTS.asset(
    ins=CALIBRATION_INPUTS,
    schema=REPORT_SCHEMA,
    description="HTML calibration report per model version: reliability diagrams, channel table, NC-ECE vs "
    "naive ECE, recalibration results (reports/calibration/<version>.html), and an overview with the verdict "
    "per version and the versions that could not be built, with the reason (reports/calibration.html).",
)
def calibration(
    context: dg.AssetExecutionContext, inbox: InboxResource, settings: SettingsResource, **tables: pl.DataFrame
) -> dg.Output[pl.DataFrame]:
    layout, created = inbox.layout, _now()
    versions = _built_versions(tables)
    missing = _missing_versions(context.instance, versions)
    rows, summaries = [], []
    for version in versions:
        html, summary = _version_page(tables, version, settings)
        written = _write(layout.reports / "calibration" / f"{version}.html", html)
        rows.append({"report": "calibration", "scope": version, "created": created, **written})
        summaries.append(summary)
    nc_ece = tables["nc_ece_report"]
    verdicts = ri.calibration_verdicts(
        nc_ece.filter(pl.col(MODEL_VERSION_COLUMN).is_in(versions)) if versions else nc_ece.head(0),
        settings.nc_ece_limit,
    )
    overview = ri.render_calibration_overview(verdicts, missing, limit=settings.nc_ece_limit, created=created)
    _write(layout.reports / "calibration.html", overview)
    _publish_status(layout, ri.StageStatus(
        report="calibration",
        title="Calibration",
        verdict=ri.calibration_verdict_lines(verdicts, settings.nc_ece_limit) or ["no model version built yet"],
        built=created,
        newest_input=_newest_input(context, [a.key for a in CALIBRATION_INPUTS.values()]),
        links=[("overview", "calibration.html")] + [(v, f"calibration/{v}.html") for v in versions],
        missing=missing,
        missing_kind="model version",
    ))
    frame = pl.DataFrame(rows, schema=REPORT_SCHEMA)
    return dg.Output(
        frame,
        metadata={
            "versions": len(versions),
            "missing": dg.MetadataValue.md("\n".join(f"- `{v}`: {why}" for v, why in missing) or "none"),
            "files": dg.MetadataValue.md("\n".join(f"- `{r['path']}`" for r in rows) or "none"),
            "summary": dg.MetadataValue.md("\n\n".join(summaries) or "no model version yet"),
        },
    )


CLEANING_INPUTS = {"images": dg.AssetIn(IMAGES), **{n: dg.AssetIn(CLEANING.key(n)) for n in cp.REPORT_INPUTS}}


@REPORTS.asset(
    ins=CLEANING_INPUTS,
    schema=REPORT_SCHEMA,
    description="HTML cleaning report (reports/cleaning.html): review progress, issue table per dataset and "
    "rule (Gröger et al. 2023 Table 1), agreement with CIs, ranking quality (and vs known truth), speed-up, impact on "
    "model metrics, stopping-rule sensitivity, expert vs lay, top candidates as thumbnails. Before any answer "
    "it shows the ranked candidates and says that no answers have arrived.",
)
def cleaning(
    context: dg.AssetExecutionContext, images: pl.DataFrame, inbox: InboxResource, **tables: pl.DataFrame
) -> dg.Output[pl.DataFrame]:
    created = _now()
    page = cp.cleaning_report(images, tables, created=created)
    frame = _publish_page(
        context, inbox.layout, "cleaning", "Data cleaning", ",".join(page.datasets), page.html, created, page.verdict,
        [a.key for a in CLEANING_INPUTS.values()],
    )
    return dg.Output(frame, metadata={"path": frame["path"][0], "datasets": len(page.datasets), "status": page.verdict})


CORRECTNESS_INPUTS = {
    name: dg.AssetIn(CORRECTNESS.key(name)) for name in ("criterion_audit", "ue_sensitivity", "false_acceptance")
}


@REPORTS.asset(
    ins=CORRECTNESS_INPUTS,
    schema=REPORT_SCHEMA,
    description="HTML correctness report (reports/correctness.html): H_f vs F_f per task, the AUROC table with "
    "reversals highlighted, false acceptance by error category.",
)
def correctness(
    context: dg.AssetExecutionContext, inbox: InboxResource, **tables: pl.DataFrame
) -> dg.Output[pl.DataFrame]:
    from noisycal_platform.correctness.report import correctness_status_line, render_correctness_report

    layout = inbox.layout
    synthetic = (layout.generations.parent / "SYNTHETIC").is_file()
    created = _now()
    text = render_correctness_report(**tables, synthetic=synthetic, created=created)
    verdict = correctness_status_line(tables["criterion_audit"], synthetic=synthetic)
    frame = _publish_page(
        context, layout, "correctness", "Correctness criteria", "all", text, created, verdict,
        [a.key for a in CORRECTNESS_INPUTS.values()],
    )
    return dg.Output(frame, metadata={"path": frame["path"][0], "synthetic_inputs": synthetic})
