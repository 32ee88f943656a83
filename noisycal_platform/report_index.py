"""The reports' front page: each stage's latest verdict and freshness, and the calibration overview (one line
per model version, the versions that could not be built and why).

Each report build leaves a small status record beside its HTML (``reports/.status/<report>.json``: verdict
lines, build time, time of the newest input, links, missing parts); the index is rendered from those records
alone, so a stage that fails to build keeps its last status and never blanks the others.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import polars as pl

from noisycal_platform import report_html as rh
from noisycal_platform.files import atomic_write_text

__all__ = [
    "STATUS_FOLDER",
    "StageStatus",
    "calibration_verdict_lines",
    "calibration_verdicts",
    "read_statuses",
    "render_calibration_overview",
    "render_index",
    "write_status",
]

STATUS_FOLDER = ".status"
_ORDER = ("cleaning", "calibration", "correctness")
_TITLES = {"cleaning": "Data cleaning", "calibration": "Calibration", "correctness": "Correctness criteria"}


@dataclass(frozen=True)
class StageStatus:
    """What the index shows for one report: ``verdict`` (plain sentences, one per line), ``built`` and
    ``newest_input`` (ISO 8601 UTC; None when no input was ever materialised), ``links`` (label, path relative
    to the reports folder) and ``missing`` (part, reason) — e.g. a model version whose latest run failed."""

    report: str
    title: str
    verdict: list[str]
    built: str
    newest_input: str | None = None
    links: list[tuple[str, str]] = field(default_factory=list)
    missing: list[tuple[str, str]] = field(default_factory=list)
    missing_kind: str = "part"

    @classmethod
    def from_dict(cls, d: Mapping) -> StageStatus:
        return cls(
            report=str(d["report"]),
            title=str(d["title"]),
            verdict=[str(x) for x in d.get("verdict", [])],
            built=str(d["built"]),
            newest_input=d.get("newest_input"),
            links=[(str(a), str(b)) for a, b in d.get("links", [])],
            missing=[(str(a), str(b)) for a, b in d.get("missing", [])],
            missing_kind=str(d.get("missing_kind", "part")),
        )


def write_status(reports: Path, status: StageStatus) -> Path:
    """``reports/.status/<report>.json`` (atomic)."""
    path = Path(reports) / STATUS_FOLDER / f"{status.report}.json"
    atomic_write_text(path, json.dumps(asdict(status), indent=1, sort_keys=True))
    return path


def read_statuses(reports: Path) -> list[StageStatus]:
    """Every readable status record, stages in pipeline order; an unreadable record is skipped (the index
    then shows that stage as not built rather than failing)."""
    out = []
    folder = Path(reports) / STATUS_FOLDER
    for p in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            out.append(StageStatus.from_dict(json.loads(p.read_text(encoding="utf-8"))))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    rank = {name: i for i, name in enumerate(_ORDER)}
    return sorted(out, key=lambda s: (rank.get(s.report, len(rank)), s.report))


def calibration_verdicts(nc_ece_report: pl.DataFrame, limit: float) -> pl.DataFrame:
    """Per model version: NC-ECE with its interval and the verdict against ``limit`` (:func:`report_html.ci_verdict`:
    within when the whole 95% interval is at or below the limit, above when it is wholly above, else not
    enough evidence). Columns model_version, kind ("" for a binary version, "top-label" / "classwise" for the two
    rows of a multi-class one), nc_ece, ci_low, ci_high, verdict. nc_ece is the estimate the interval is centred
    on: value_debiased where the report has it, else the plug-in value. Subgroup rows are left to the version's
    page."""
    schema = {"model_version": pl.String, "kind": pl.String, "nc_ece": pl.Float64, "ci_low": pl.Float64,
              "ci_high": pl.Float64, "verdict": pl.String}
    need = {"model_version", "estimator", "value", "ci_low", "ci_high"}
    if nc_ece_report.height == 0 or not need <= set(nc_ece_report.columns):
        return pl.DataFrame(schema=schema)
    nc = nc_ece_report.filter(pl.col("estimator") == "nc_ece")
    if "subgroup_value" in nc.columns:
        nc = nc.filter(pl.col("subgroup_value").is_null())
    kind = pl.col("kind").fill_null("binary") if "kind" in nc.columns else pl.lit("binary")
    nc = nc.with_columns(
        pl.when(kind == "binary").then(pl.lit("")).otherwise(kind.str.replace("_", "-")).alias("_kind")
    ).sort("model_version", "_kind", descending=[False, True])
    rows = [
        {"model_version": r["model_version"], "kind": r["_kind"],
         "nc_ece": r["value"] if r.get("value_debiased") is None else r["value_debiased"], "ci_low": r["ci_low"],
         "ci_high": r["ci_high"],
         "verdict": rh.ci_verdict(r["value"], r["ci_low"], r["ci_high"], limit)}
        for r in nc.iter_rows(named=True)
    ]
    return pl.DataFrame(rows, schema=schema)


def _verdict_sentence(r: Mapping, limit: float) -> str:
    est = rh.fmt_ci(r["nc_ece"], r["ci_low"], r["ci_high"])
    model = f"model {r['model_version']}" + (f" ({r['kind']})" if r.get("kind") else "")
    v = r["verdict"]
    if v == "within":
        return f"{model}: within the limit {limit:g} (NC-ECE {est})"
    if v == "above":
        return f"{model}: above the limit {limit:g} (NC-ECE {est})"
    return f"{model}: not enough evidence against the limit {limit:g} (NC-ECE {est})"


def calibration_verdict_lines(verdicts: pl.DataFrame, limit: float) -> list[str]:
    """One plain sentence per model version."""
    return [_verdict_sentence(r, limit) for r in verdicts.iter_rows(named=True)]


def render_calibration_overview(
    verdicts: pl.DataFrame,
    missing: Sequence[tuple[str, str]],
    *,
    limit: float,
    created: str | None = None,
) -> str:
    """``reports/calibration.html``: one row per built model version (NC-ECE, interval, verdict, link)
    and the registered versions without a report, each with the reason."""
    rows = [
        {"model version": f"<a href='calibration/{rh.esc(r['model_version'])}.html'>{rh.esc(r['model_version'])}</a>"
         + (f" ({rh.esc(r['kind'])})" if r.get("kind") else ""),
         "NC-ECE (95% CI)": rh.esc(rh.fmt_ci(r["nc_ece"], r["ci_low"], r["ci_high"])),
         f"against the limit {limit:g}": rh.esc(r["verdict"])}
        for r in verdicts.iter_rows(named=True)
    ]
    body = ["<h2>Model versions</h2>"]
    if rows:
        head = "".join(f"<th class='l'>{c}</th>" for c in rows[0])
        trs = "".join("<tr>" + "".join(f"<td class='l'>{v}</td>" for v in r.values()) + "</tr>" for r in rows)
        body.append(f"<table><thead><tr>{head}</tr></thead><tbody>{trs}</tbody></table>")
        body.append("<p class='note'>Within: the whole 95% interval lies at or below the clinic's limit "
                    "(<code>nc_ece_limit</code> in settings.json). Above: the whole interval lies above it. "
                    "Otherwise there is not enough evidence either way; more annotations narrow the interval.</p>")
    else:
        body.append(rh.empty_note("a row appears for each model version once its predictions "
                                  "(<code>models/&lt;version&gt;/predictions.csv</code>) and annotations are in."))
    body += _missing_html(missing, "model version")
    return rh.page("Calibration reports", body, created=created)


def _missing_html(missing: Sequence[tuple[str, str]], what: str) -> list[str]:
    if not missing:
        return []
    items = "".join(f"<li><b>{rh.esc(part)}</b>: {rh.esc(reason)}</li>" for part, reason in missing)
    what = rh.esc(what)
    return [f"<h3 class='bad'>Not in this report ({len(missing)} {what}{'s' if len(missing) != 1 else ''})</h3>"
            f"<ul>{items}</ul><p class='note'>The report is built from the other parts; these appear once "
            "they are computed.</p>"]


def render_index(statuses: Iterable[StageStatus], *, home: str, other_files: Iterable[str] = ()) -> str:
    """``reports/index.html``: per stage its verdict lines, when it was built and when its newest input
    arrived, its links and what is missing; then every other report file present."""
    body = [f"<p class='note'>Home: <code>{rh.esc(home)}</code>.</p>"]
    seen = set()
    statuses = list(statuses)
    for st in statuses:
        seen.update(p for _, p in st.links)
        stale = st.newest_input is not None and st.newest_input > st.built
        fresh = (f"built {rh.esc(rh.fmt_time(st.built))}; newest input {rh.esc(rh.fmt_time(st.newest_input))}"
                 + (" — <b class='bad'>inputs changed after this build; a rebuild is due</b>" if stale else ""))
        links = " · ".join(f"<a href='{rh.esc(p)}'>{rh.esc(label)}</a>" for label, p in st.links)
        verdict = "".join(f"<li>{rh.esc(v)}</li>" for v in st.verdict) or "<li>no verdict yet</li>"
        body.append(f"<h2>{rh.esc(st.title)}</h2><p class='note'>{fresh}</p><ul>{verdict}</ul><p>{links}</p>")
        body += _missing_html(st.missing, st.missing_kind)
    built = {st.report for st in statuses}
    waiting = {
        "cleaning": "it is built once a dataset is registered and ranked.",
        "calibration": "it is built once a model version's predictions and annotations are in.",
        "correctness": "it is built once model generations and an audit are in.",
    }
    for name in _ORDER:
        if name not in built:
            body.append(f"<h2>{rh.esc(_TITLES[name])}</h2><p class='empty'>Not built yet: {waiting[name]}</p>")
    rest = sorted(p for p in other_files if p not in seen)
    if rest:
        body.append("<h2>All report files</h2><ul>"
                    + "".join(f"<li><a href='{rh.esc(p)}'>{rh.esc(p)}</a></li>" for p in rest) + "</ul>")
    return rh.page("noisycal-platform reports", body)
